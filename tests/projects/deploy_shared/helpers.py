# a project module, in the project package every component shares
