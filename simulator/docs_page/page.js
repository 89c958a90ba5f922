// The docs page of `peach dev` (simulator/docs_page): reads /_peach/openapi.json and builds,
// for every endpoint, a form from its parameters' JSON Schemas. Send posts the form to the
// endpoint as a JSON body and shows the answer: status, headers, and the body — a stream's
// chunks one by one, as the body's reader gets them.
//
// Every text that comes from the project (names, docstrings, defaults, answers) goes into the
// page as text (textContent, attribute values), never through an HTML parser.
"use strict";

const DOCUMENT_URL = "/_peach/openapi.json";
const JSON_MEDIA = /^application\/([\w.+-]*\+)?json\s*(;|$)/i;
const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;
const METHODS = ["post", "get"];

/** An element with attributes (``text``: its text) and children (strings become text). */
function node(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") element.textContent = String(value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== undefined && child !== null && child !== false) element.append(child);
  }
  return element;
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function own(object, key) {
  return isObject(object) && Object.prototype.hasOwnProperty.call(object, key)
    ? object[key]
    : undefined;
}

/** Shown as one line: strings as they are, anything else as JSON. */
function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// -- the document ---------------------------------------------------------------------------

/** ``schema`` with its local ``$ref``s followed (``#/components/schemas/Name``). */
function resolve(schema, doc) {
  for (let hops = 0; isObject(schema) && typeof schema.$ref === "string" && hops < 32; hops++) {
    if (!schema.$ref.startsWith("#/")) return {};
    let target = doc;
    for (const part of schema.$ref.slice(2).split("/")) {
      target = own(target, part.replace(/~1/g, "/").replace(/~0/g, "~"));
    }
    schema = target;
  }
  return isObject(schema) ? schema : {};
}

/** What a form needs of a schema: ``kind`` (enum, boolean, number, integer, string, json),
 * the enum's ``values``, ``nullable``, and a short text of the type. */
function describe(schema, doc, depth = 0) {
  let s = resolve(schema, doc);
  let nullable = false;
  for (const key of ["anyOf", "oneOf"]) {
    if (!Array.isArray(s[key])) continue;
    const options = s[key].map((option) => resolve(option, doc));
    const real = options.filter((option) => option.type !== "null");
    nullable = nullable || real.length < options.length;
    let merged = null;
    if (real.length === 1) merged = { ...real[0] };
    else if (real.length > 0 && real.every((o) => "const" in o || Array.isArray(o.enum))) {
      merged = { enum: real.flatMap((o) => ("const" in o ? [o.const] : o.enum)) };
    }
    if (merged) {
      for (const kept of ["default", "description"]) if (kept in s) merged[kept] = s[kept];
      s = merged;
    }
  }
  let type = s.type;
  if (Array.isArray(type)) {
    nullable = nullable || type.includes("null");
    const rest = type.filter((t) => t !== "null");
    type = rest.length === 1 ? rest[0] : undefined;
  }
  if (Array.isArray(s.enum) && s.enum.includes(null)) nullable = true;
  const values =
    "const" in s ? [s.const] : Array.isArray(s.enum) ? s.enum.filter((v) => v !== null) : null;
  let kind = "json";
  if (values) kind = "enum";
  else if (["boolean", "number", "integer", "string"].includes(type)) kind = type;
  return {
    kind,
    values,
    nullable,
    schema: s,
    text: typeText(s, type, values, doc, depth) + (nullable ? " or null" : ""),
  };
}

function typeText(s, type, values, doc, depth) {
  if (values) return "one of " + values.map((v) => JSON.stringify(v)).join(", ");
  if (type === "array") {
    if (depth > 3) return "list"; // a recursive schema (a $ref to itself) ends here
    const items = describe(s.items, doc, depth + 1);
    return Object.keys(items.schema).length ? `list of ${items.text}` : "list";
  }
  if (type === "object") return "object (JSON)";
  return type || "any JSON value";
}

/** The endpoints of a document: url, summary, description, parameters, stream media type. */
function endpointsOf(doc) {
  const endpoints = [];
  for (const [url, item] of Object.entries(own(doc, "paths") || {})) {
    if (!isObject(item) || typeof url !== "string" || !url.startsWith("/")) continue;
    const operations = METHODS.map((m) => own(item, m)).filter(isObject);
    if (operations.length === 0) continue;
    endpoints.push({
      url,
      summary: operations.map((o) => o.summary).find((t) => typeof t === "string") || "",
      description: operations.map((o) => o.description).find((t) => typeof t === "string") || "",
      name: operations.map((o) => o["x-peach-endpoint"]).find((t) => typeof t === "string") || "",
      parameters: parametersOf(operations, doc),
      stream: streamOf(operations, doc),
    });
  }
  return endpoints;
}

/** The parameters of an endpoint: its POST body's properties, else its GET query's. */
function parametersOf(operations, doc) {
  const byName = new Map();
  for (const operation of operations) {
    const content = own(own(resolve(operation.requestBody, doc), "content"), "application/json");
    const body = resolve(own(content, "schema"), doc);
    const required = Array.isArray(body.required) ? body.required : [];
    for (const [name, schema] of Object.entries(own(body, "properties") || {})) {
      if (!byName.has(name)) byName.set(name, { name, schema, required: required.includes(name) });
    }
    for (const raw of Array.isArray(operation.parameters) ? operation.parameters : []) {
      const parameter = resolve(raw, doc);
      if (parameter.in !== "query" || typeof parameter.name !== "string") continue;
      if (!byName.has(parameter.name)) {
        const schema = { ...resolve(parameter.schema, doc) };
        if (parameter.description && !schema.description)
          schema.description = parameter.description;
        byName.set(parameter.name, {
          name: parameter.name,
          schema,
          required: !!parameter.required,
        });
      }
    }
  }
  return [...byName.values()];
}

/** The media type of an endpoint's stream ("" when the document names none), or null when
 * it does not stream: a ``stream`` parameter, or a 200 answer that is not JSON. */
function streamOf(operations, doc) {
  let streams = false;
  const media = [];
  for (const operation of operations) {
    if (operation["x-peach-stream"]) streams = true;
    const body = resolve(
      own(own(resolve(operation.requestBody, doc), "content"), "application/json"),
      doc,
    );
    if (own(own(resolve(own(body, "schema"), doc), "properties"), "stream")) streams = true;
    for (const raw of Array.isArray(operation.parameters) ? operation.parameters : []) {
      if (resolve(raw, doc).name === "stream") streams = true;
    }
    media.push(
      ...Object.keys(own(resolve(own(own(operation, "responses"), "200"), doc), "content") || {}),
    );
  }
  const other = media.find((type) => !JSON_MEDIA.test(type));
  if (other) return other;
  return streams ? media[0] || "" : null;
}

// -- a form ---------------------------------------------------------------------------------

/** One input of a form: its element, and how its value is read. */
function fieldFor(parameter, id, doc) {
  const type = describe(parameter.schema, doc);
  const hintId = `${id}-hint`;
  const errorId = `${id}-error`;
  const described = `${hintId} ${errorId}`;
  let input;
  if (type.kind === "enum" || type.kind === "boolean") {
    const choices = type.kind === "boolean" ? [true, false] : type.values;
    if (type.nullable) choices.push(null);
    input = node("select", { id, name: parameter.name, "aria-describedby": described });
    input.append(node("option", { value: "", text: "(not sent)" }));
    choices.forEach((value, index) =>
      input.append(node("option", { value: String(index), text: shown(value) })),
    );
    input.choices = choices;
  } else if (type.kind === "json") {
    input = node("textarea", {
      id,
      name: parameter.name,
      rows: 2,
      spellcheck: "false",
      "aria-describedby": described,
    });
  } else {
    const mode = type.kind === "integer" ? "numeric" : type.kind === "number" ? "decimal" : null;
    input = node("input", {
      id,
      name: parameter.name,
      type: "text",
      inputmode: mode,
      spellcheck: "false",
      autocomplete: "off",
      "aria-describedby": described,
    });
  }
  if (parameter.required) input.setAttribute("aria-required", "true");
  const schema = type.schema;
  const hasDefault = "default" in schema;
  if (hasDefault && input.tagName !== "SELECT")
    input.placeholder = `default: ${shown(schema.default)}`;
  const hint = [type.text];
  if (parameter.required) hint.push("required");
  else hint.push(hasDefault ? `default ${JSON.stringify(schema.default)}` : "optional");
  if (typeof schema.description === "string" && schema.description) hint.push(schema.description);
  const error = node("span", { id: errorId, class: "field-error" });
  const element = node(
    "div",
    { class: "field" },
    node(
      "label",
      { for: id },
      node("code", { text: parameter.name }),
      parameter.required ? node("span", { class: "required", text: " (required)" }) : null,
    ),
    input,
    node("small", { id: hintId, class: "hint", text: hint.join(" · ") }),
    error,
  );

  /** ``{send, value}``, or ``{problem}``; an empty field is not sent (its default applies). */
  function read() {
    input.removeAttribute("aria-invalid");
    error.textContent = "";
    const raw = input.value;
    if (raw === "") return { send: false };
    if (input.tagName === "SELECT") return { send: true, value: input.choices[Number(raw)] };
    if (type.kind === "string") return { send: true, value: raw };
    const text = raw.trim();
    if (type.kind === "integer" || type.kind === "number") {
      // not a number: sent as typed, so the endpoint's own answer (a 400) says what is wrong
      return { send: true, value: NUMBER.test(text) ? Number(text) : raw };
    }
    try {
      return { send: true, value: JSON.parse(text) };
    } catch (problem) {
      input.setAttribute("aria-invalid", "true");
      error.textContent = "not valid JSON";
      return { problem: `${parameter.name} is not valid JSON` };
    }
  }
  return { element, read, input };
}

// -- an answer ------------------------------------------------------------------------------

/** The answer panel of an endpoint: what Send got back. */
class AnswerView {
  constructor(id) {
    this.element = node("div", { class: "answer", id, hidden: true });
  }

  start(method, url) {
    this.element.hidden = false;
    this.status = node("p", { class: "status", role: "status", text: `${method} ${url} …` });
    this.headers = node("div", { class: "headers" });
    this.body = node("div", { class: "body" });
    this.end = node("p", { class: "end", role: "status" });
    this.element.replaceChildren(
      node("h3", { text: "Answer" }),
      this.status,
      this.headers,
      this.body,
      this.end,
    );
  }

  failed(message) {
    this.status.replaceChildren(node("strong", { class: "problem", text: message }));
  }

  head(response, method, url, ms) {
    const line = node("strong", { text: `${response.status} ${response.statusText}`.trim() });
    this.status.replaceChildren(line, ` · ${method} ${url} · first byte in ${ms} ms`);
    this.status.dataset.status = String(response.status);
    const rows = [...response.headers].sort(
      ([a], [b]) => peachFirst(a) - peachFirst(b) || a.localeCompare(b),
    );
    const table = node("table", {}, node("caption", { text: "Headers" }));
    for (const [name, value] of rows) {
      table.append(
        node(
          "tr",
          { class: name.startsWith("x-peach-") ? "peach" : null },
          node("th", { scope: "row", text: name }),
          node("td", { text: value }),
        ),
      );
    }
    this.headers.replaceChildren(table);
  }

  openStream(media) {
    this.chunks = node("ol", { class: "chunks", "aria-label": `Chunks (${media})` });
    this.body.replaceChildren(this.chunks);
  }

  chunk(text, ms) {
    const item = node("li", {}, node("pre", { text }), node("small", { text: `${ms} ms` }));
    this.chunks.append(item);
  }

  whole(text, media) {
    let shownText = text;
    if (JSON_MEDIA.test(media)) {
      try {
        shownText = JSON.stringify(JSON.parse(text), null, 2);
      } catch (problem) {
        // not JSON after all: shown as it came
      }
    }
    this.body.replaceChildren(node("pre", { class: "whole", text: shownText }));
  }

  finish(message, problem = false) {
    this.end.className = problem ? "end problem" : "end";
    this.end.textContent = message;
  }
}

function peachFirst(name) {
  return name.startsWith("x-peach-") ? 0 : 1;
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

/** Send the form of ``endpoint`` and show its answer in ``view``. */
async function send(endpoint, view, controls) {
  const values = {};
  const problems = [];
  for (const field of controls.fields) {
    const read = field.read();
    if (read.problem) problems.push(read.problem);
    else if (read.send) values[field.name] = read.value;
  }
  const target = new URL(endpoint.url, window.location.origin);
  view.start("POST", endpoint.url);
  if (problems.length) return view.failed(`Not sent: ${problems.join("; ")}.`);
  if (target.origin !== window.location.origin)
    return view.failed("Not sent: the url is not on this server.");
  const streaming = controls.stream !== null && controls.stream.checked;
  if (streaming) values.stream = true;
  const controller = new AbortController();
  controls.sending(controller);
  const started = performance.now();
  const since = () => Math.round(performance.now() - started);
  let response;
  try {
    response = await fetch(target, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(values),
      cache: "no-store",
      signal: controller.signal,
    });
  } catch (problem) {
    controls.done();
    return view.failed(
      controller.signal.aborted
        ? "Stopped before an answer came."
        : `No answer: ${problem.message}`,
    );
  }
  view.head(response, "POST", endpoint.url, since());
  const media = response.headers.get("content-type") || "";
  // a stream has no length (whatever its media type); an envelope, even to a stream request, has
  const live = streaming && !response.headers.has("content-length");
  if (live) view.openStream(media);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let count = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const piece = decoder.decode(value, { stream: true });
      text += piece;
      count += 1;
      if (live) view.chunk(piece, since());
    }
    text += decoder.decode();
    if (live) view.finish(`Stream ended: ${plural(count, "chunk")} in ${since()} ms.`);
    else {
      view.whole(text, media);
      view.finish(`Answered in ${since()} ms.`);
    }
  } catch (problem) {
    if (!live) view.whole(text, media);
    if (controller.signal.aborted) view.finish(`Stopped after ${plural(count, "chunk")}.`);
    else
      view.finish(
        `The stream was cut after ${plural(count, "chunk")}: the method raised (its error is in the peach dev log).`,
        true,
      );
  } finally {
    controls.done();
  }
}

// -- the page -------------------------------------------------------------------------------

function endpointSection(endpoint, index, doc) {
  const id = `endpoint-${index}`;
  const title = node("h2", { id: `${id}-title` }, node("code", { text: endpoint.url }));
  if (endpoint.name) title.append(" ", node("span", { class: "name", text: endpoint.name }));
  if (endpoint.stream !== null) title.append(" ", node("span", { class: "badge", text: "stream" }));
  const fields = endpoint.parameters
    .filter((parameter) => parameter.name !== "stream")
    .map((parameter, n) => {
      const field = fieldFor(parameter, `${id}-p${n}`, doc);
      field.name = parameter.name;
      return field;
    });
  const form = node("form", { "aria-labelledby": `${id}-title`, novalidate: true });
  const fieldset = node("fieldset", {}, node("legend", { text: "Parameters" }));
  if (fields.length === 0) fieldset.append(node("p", { class: "hint", text: "No parameters." }));
  for (const field of fields) fieldset.append(field.element);
  form.append(fieldset);
  let stream = null;
  if (endpoint.stream !== null) {
    stream = node("input", { type: "checkbox", id: `${id}-stream`, checked: true });
    const label = endpoint.stream ? `Stream the answer (${endpoint.stream})` : "Stream the answer";
    form.append(
      node(
        "div",
        { class: "field check" },
        stream,
        node("label", { for: `${id}-stream`, text: label }),
      ),
    );
  }
  const sendButton = node("button", { type: "submit", text: "Send" });
  const stopButton = node("button", {
    type: "button",
    class: "stop",
    text: "Stop",
    disabled: true,
  });
  form.append(node("div", { class: "actions" }, sendButton, stopButton));
  const view = new AnswerView(`${id}-answer`);
  let controller = null;
  const controls = {
    fields,
    stream,
    sending(current) {
      controller = current;
      sendButton.disabled = true;
      stopButton.disabled = false;
    },
    done() {
      controller = null;
      sendButton.disabled = false;
      stopButton.disabled = true;
    },
  };
  stopButton.addEventListener("click", () => controller && controller.abort());
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(endpoint, view, controls);
  });
  const section = node(
    "section",
    { class: "endpoint", id, "data-url": endpoint.url, "aria-labelledby": `${id}-title` },
    title,
  );
  if (endpoint.summary) section.append(node("p", { class: "summary", text: endpoint.summary }));
  if (endpoint.description)
    section.append(node("p", { class: "description", text: endpoint.description }));
  section.append(form, view.element);
  return section;
}

function render(doc) {
  const info = own(doc, "info") || {};
  const title = typeof info.title === "string" && info.title ? info.title : "API docs";
  document.title = `${title} · peach dev`;
  document.getElementById("title").textContent = title;
  document.getElementById("about").textContent =
    typeof info.description === "string" ? info.description : "";
  const endpoints = endpointsOf(doc);
  const index = document.getElementById("index");
  const main = document.getElementById("endpoints");
  index.replaceChildren();
  main.replaceChildren();
  endpoints.forEach((endpoint, n) => {
    index.append(
      node(
        "li",
        {},
        node("a", { href: `#endpoint-${n}` }, node("code", { text: endpoint.url })),
        endpoint.summary ? ` ${endpoint.summary}` : "",
      ),
    );
    main.append(endpointSection(endpoint, n, doc));
  });
  const version = typeof doc.openapi === "string" ? ` · OpenAPI ${doc.openapi}` : "";
  const read = new Date().toLocaleTimeString();
  status(`${plural(endpoints.length, "endpoint")}${version} · read at ${read}.`);
  performance.mark("peach-docs-rendered");
}

function status(message, problem = false) {
  const line = document.getElementById("document-status");
  line.className = problem ? "problem" : "";
  line.replaceChildren(
    message,
    " ",
    node("a", { href: DOCUMENT_URL, text: "The OpenAPI document" }),
  );
}

async function load() {
  let response;
  try {
    response = await fetch(DOCUMENT_URL, { cache: "no-store" });
  } catch (problem) {
    return status(`Could not read the OpenAPI document: ${problem.message}.`, true);
  }
  if (!response.ok) {
    return status(
      `Could not read the OpenAPI document: ${response.status} ${response.statusText}.`,
      true,
    );
  }
  let doc;
  try {
    doc = await response.json();
  } catch (problem) {
    return status("The OpenAPI document is not JSON.", true);
  }
  render(doc);
}

load();
