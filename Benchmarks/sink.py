"""A stand-in for Sentry in the battery scenario's online runs: answers every POST with 200 and keeps
nothing. Prints the port it listens on (127.0.0.1), then serves until killed."""
import http.server


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection, as Sentry does

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *arguments):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_port, flush=True)
server.serve_forever()
