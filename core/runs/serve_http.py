"""serve.py's HTTP server (http.server, a thread per connection up to `connections`, one prediction at a time):
POST /predict and GET (or HEAD) /health, with the limits and one-line JSON errors of docs/runs.md; no request stops
the server, and no client holds a thread longer than `timeout` seconds per request, however slowly it trickles in.
Standard library only; it travels beside serve.py in every export, which loads it for --http and hands it its rows
and parsing (`kit`).
"""

from __future__ import annotations

import json
import re
import sys

DRAIN_LIMIT = 16 << 20  # bytes of a refused body read and dropped, so that the client sees the 413


def serve_http(kit, rows, address, limit, timeout, quiet=False, err=None, connections=32):
    """Serve POST /predict and GET /health on `address` ("HOST:PORT", "PORT", "[::1]:PORT") until interrupted;
    the log on `err` (stderr). `kit`: serve.py's RowError and JSON handling (see the module doc). A connection
    beyond `connections` open ones is answered 503 at once and closed."""
    import collections
    import http.server
    import io
    import socket
    import socketserver
    import threading
    import time
    from urllib.parse import urlsplit

    RowError, parse_json, _requests, _collect = kit.RowError, kit.parse_json, kit.requests, kit.collect
    _line, _shown = kit.line, kit.shown
    err = err or sys.stderr
    host, port = _address(kit, address)
    lock = threading.Lock()  # one prediction at a time: the model's threads are the CPU's, not the clients'
    health = {
        "status": "ok",
        "task": rows.task,
        "format": rows.served.manifest.get("format"),
        "step": rows.served.manifest.get("step"),
    }
    routes = {"/predict": "POST", "/health": "GET"}
    slots = threading.BoundedSemaphore(connections)
    busy = _busy_answer(f"busy: {connections} connections are open (--max-connections); try again")

    class Deadline(socket.SocketIO):
        """The connection's reads, each waiting only until `deadline` (time.monotonic()): a request trickling in
        a byte at a time gets no more time than a silent one."""

        deadline = None

        def readinto(self, buffer):
            left = timeout if self.deadline is None else self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the request did not arrive within {timeout:g} s")
            self._sock.settimeout(left)
            return super().readinto(buffer)

    class Handler(http.server.BaseHTTPRequestHandler):
        default_request_version = "HTTP/1.0"  # a garbled request line is answered with a status line too

        def version_string(self):
            return "amp-console-serve"

        def finish(self):
            """Read what the client sent that no one read (a refused body) before the connection closes:
            closing over unread bytes resets it, which can destroy the answer before the client reads it."""
            super().finish()
            try:
                self.connection.setblocking(False)
            except OSError:
                return
            _drain(self.connection.recv, DRAIN_LIMIT)

        def setup(self):
            self.timeout = timeout  # StreamRequestHandler sets it on the socket: every write waits this long at most
            super().setup()
            self.rfile.close()  # read through Deadline instead
            self.rfile = io.BufferedReader(Deadline(self.connection, "rb"))

        def handle_one_request(self):
            self.rfile.raw.deadline = time.monotonic() + timeout  # the next request, all of it, by then
            super().handle_one_request()

        def do_GET(self):
            self._route()

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

        def _route(self):
            path = urlsplit(self.path).path
            method = routes.get(path)
            if method is None:
                return self._reply(404, {"error": f"no such path {_shown(path)}: POST /predict or GET /health"})
            if self.command != method and (self.command, method) != ("HEAD", "GET"):
                return self._reply(
                    405, {"error": f"{path} takes {method}, not {_shown(self.command)[1:-1]}"}, Allow=method
                )
            if path == "/health":
                return self._reply(200, health)
            try:
                document = parse_json(self._body())
                with lock:
                    answer = _collect(rows.answer(_requests(document)[0]), isinstance(document, list))
                if isinstance(answer, RowError):
                    raise answer
            except _Refused as exc:
                return self._reply(exc.status, {"error": str(exc)}, close=True)
            except RowError as exc:
                return self._reply(400, {"error": str(exc)})
            except Exception as exc:
                self.log_error("the model failed: %s", _line(exc))
                return self._reply(500, {"error": f"the model failed: {_line(exc)}"})
            self._reply(200, answer)

        def _body(self):
            """The request body as text: refused (_Refused) without a Content-Length, over the limit, not
            arriving in time, or cut short."""
            if self.headers.get("Transfer-Encoding"):
                raise _Refused(411, "send the body with a Content-Length (chunked bodies are not read)")
            lengths = self.headers.get_all("Content-Length") or []
            if not lengths:
                raise _Refused(411, "POST /predict needs a Content-Length")
            if len(lengths) > 1 or not re.fullmatch(r"\s*\d{1,19}\s*", lengths[0]):
                raise _Refused(400, f"Content-Length {_shown(', '.join(lengths))} is not one number of bytes")
            length = int(lengths[0])
            if length > limit:  # read and dropped while it keeps coming: the client then gets the 413, not a reset
                _drain(self.rfile.read1, length if length <= DRAIN_LIMIT else 0)
                raise _Refused(413, f"the body is {length:,} bytes, more than {limit:,} (--max-request-bytes)")
            data = bytearray()
            while len(data) < length:
                try:
                    piece = self.rfile.read1(min(1 << 16, length - len(data)))
                except TimeoutError:
                    raise _Refused(408, f"the body did not arrive within {timeout:g} s") from None
                if not piece:
                    raise _Refused(400, f"the body ended after {len(data):,} of its {length:,} bytes (Content-Length)")
                data += piece
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise RowError("the body is not UTF-8 text") from None

        def _reply(self, status, value, close=False, **headers):
            self.connection.settimeout(timeout)  # a read may have left less
            body = (json.dumps(value, allow_nan=False) + "\n").encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, text in headers.items():
                self.send_header(name, text)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def send_error(self, code, message=None, explain=None):
            """http.server's own refusals (a malformed request line, headers too long, ...) as JSON too."""
            try:
                self._reply(code, {"error": _line(message or self.responses.get(code, ("refused",))[0])}, close=True)
            except OSError:
                self.close_connection = True

        def log_message(self, format, *args):
            if not quiet:
                err.write(_line(f"{self.address_string()} - {format % args}") + "\n")

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def server_bind(self):  # HTTPServer's would look the host name up (socket.getfqdn): no need, and slow
            socketserver.TCPServer.server_bind(self)
            self.server_name, self.server_port = host, self.server_address[1]

        def handle_error(self, request, client_address):
            err.write(_line(f"serve.py: {client_address[0]}: {sys.exc_info()[1]!r}") + "\n")

        closing = collections.deque()  # (when, socket) of the refused connections, closed a moment later

        def process_request(self, request, client_address):
            if slots.acquire(blocking=False):
                try:
                    return super().process_request(request, client_address)
                except BaseException:
                    slots.release()
                    raise
            if not quiet:
                err.write(f"{client_address[0]} - busy: 503 and closed ({connections} connections open)\n")
            try:  # no thread for it: the 503 if the socket takes it now, then closed once its request has come
                request.setblocking(False)
                request.send(busy)
                request.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self.closing.append((time.monotonic() + 1.0, request))
            self.service_actions()

        def process_request_thread(self, request, client_address):  # ThreadingMixIn's, the slot freed first
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                slots.release()  # before the close: a client that saw it end finds the slot free
                self.shutdown_request(request)

        def service_actions(self):
            """Close the refused connections whose moment has passed (at most `connections` wait)."""
            while self.closing and (self.closing[0][0] < time.monotonic() or len(self.closing) > connections):
                request = self.closing.popleft()[1]
                _drain(request.recv, DRAIN_LIMIT)  # what it sent, read: closing over unread bytes resets it
                request.close()

    try:
        server = Server((host, port), Handler)
    except OSError as exc:
        raise RowError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    if not is_loopback(host):
        err.write(
            f"serve.py: warning: listening on {shown}, not loopback: anyone who can reach this port can use "
            f"the model (no authentication, no TLS)\n"
        )
    err.write(
        f"serve.py: serving the {rows.task} model on http://{shown}:{server.server_address[1]} "
        f"(POST /predict, GET /health; at most {connections} connections; Ctrl-C stops)\n"
    )
    err.flush()
    with server:
        server.serve_forever(poll_interval=0.5)


def _busy_answer(message):
    """The whole HTTP answer 503 with `message` as its JSON error, closing the connection."""
    body = (json.dumps({"error": message}) + "\n").encode("utf-8")
    head = "HTTP/1.0 503 Service Unavailable\r\nServer: amp-console-serve\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n".encode() + body


def _drain(read, left):
    """Read and drop up to `left` bytes with `read(n)`, until it gives none or fails."""
    try:
        while left > 0 and (piece := read(min(1 << 16, left))):
            left -= len(piece)
    except OSError:
        pass


class _Refused(Exception):
    """A request refused before its body is read, with its HTTP status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def is_loopback(host):
    """Whether `host` names this machine's loopback only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _address(kit, text):
    """(host, port) of "HOST:PORT", "[IPV6]:PORT" or "PORT" (on 127.0.0.1)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise kit.RowError(f"--http {kit.shown(text)[1:-1]}: give HOST:PORT, e.g. 127.0.0.1:8000")
    return host, int(port)
