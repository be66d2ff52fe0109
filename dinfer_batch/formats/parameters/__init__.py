"""What a line may set besides its prompt: generation parameters, their checks and engine
names (params.py), structured outputs (structured.py), the other fields of OpenAI bodies,
accepted or refused by name (compat.py), and the ceilings that keep a value affordable
(ceilings.py)."""
