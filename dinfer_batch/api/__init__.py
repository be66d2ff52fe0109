"""The HTTP API: OpenAI's Files and Batches (`files`, `batches`), API keys and owners
(`keys`, `auth`), health and Prometheus metrics (`ops`), errors in OpenAI's shape
(`errors`), the app that ties them together (`app`)."""
