"""A webhook receiver for `dinfer-batch webhooks`: verifies each POST with the official
`openai` client (the secret from OPENAI_WEBHOOK_SECRET) and prints the event.

    OPENAI_WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py 8001
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from openai import InvalidWebhookSignatureError, OpenAI

client = OpenAI(api_key="unused")  # only verifies: webhook_secret from the environment


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        try:
            event = client.webhooks.unwrap(body, dict(self.headers.items()))
        except InvalidWebhookSignatureError:
            self.send_response(400)
        else:
            print(event.id, event.type, event.data.id, flush=True)
            self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
