"""Input lines: what a line is and what it asks for. Each shape of line (plain, chat,
OpenAI batch, `/v1/responses`) to a normalised request or a specific error (requests.py,
responses.py, which also makes the Response object an output line carries), completions'
prompt lists and a chat request's prompt (prompts.py, chat_prompt.py), infill fields
(infill.py), requests from a template and its vars or from a table's rows (template.py,
columns.py), and what a request costs in generations (cost.py)."""
