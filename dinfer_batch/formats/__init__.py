"""The formats users see: input lines into requests, generation parameters, and output lines
in OpenAI's BatchRequestOutput shape. By concern: lines/ (what an input line is and costs),
parameters/ (what a line may set), function_calling/ (tools, calls and their messages),
results/ (what goes out); limits.py (what every value must fit) and content.py (a
message's text) serve them all."""
