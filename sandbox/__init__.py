"""Running untrusted (model-written) programs: the sandbox and the judge harness inside it."""
