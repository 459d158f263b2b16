"""The labels come from a label service over TCP (one JSON line per request); a local stand-in serves them here."""
import json
import socket
import threading


def serve(labels, answer_first=None):
    """Start a stand-in label service on 127.0.0.1 in a thread and return its address. After ``answer_first``
    requests it is overloaded: it still reads each request, but never answers."""
    server = socket.create_server(('127.0.0.1', 0))

    def handle():
        conn, _ = server.accept()
        with conn, conn.makefile('rb') as requests:
            for n, line in enumerate(requests):
                if answer_first is not None and n >= answer_first:
                    continue
                ids = json.loads(line)
                conn.sendall(json.dumps(labels[ids].tolist()).encode() + b'\n')

    threading.Thread(target=handle, name='label-service', daemon=True).start()
    return server.getsockname()


class LabelClient:
    """Asks the service for the labels of a batch of example ids (no timeout: the service is "always up")."""

    def __init__(self, address):
        self.sock = socket.create_connection(address)

    def labels(self, ids):
        self.sock.sendall(json.dumps([int(i) for i in ids]).encode() + b'\n')
        reply = b''
        while not reply.endswith(b'\n'):
            chunk = self.sock.recv(4096)  # tfcc-test: hangs here
            if not chunk:
                raise ConnectionError('the label service closed the connection')
            reply += chunk
        return json.loads(reply)
