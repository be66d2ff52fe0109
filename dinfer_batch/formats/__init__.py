"""The formats users see: input lines into requests, generation parameters, and output lines
in OpenAI's BatchRequestOutput shape."""
