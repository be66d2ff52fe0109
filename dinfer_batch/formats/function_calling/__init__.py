"""Function calling (docs/tools.md, ADR 061): `tools` and `tool_choice` on a body
(tools.py), the constraint an answer with calls must meet (tool_grammar.py), a
conversation's call and result messages (tool_messages.py), and an answer read back as
text or calls (tool_calls.py)."""
