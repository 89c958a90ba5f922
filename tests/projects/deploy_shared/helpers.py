# a project module, uploaded with each component
