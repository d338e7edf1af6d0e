"""slow_reader.py PORT CLIENT_ID - a WebSocket client that never reads: it
opens /ws?clientId=CLIENT_ID with a tiny receive buffer, prints "open", and
sleeps until killed (the server's frames pile up). Handshake only; no frames
are parsed, so no WebSocket library is needed."""
import base64, os, socket, sys, time

port, cid = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # before connect: a small window
s.connect(("127.0.0.1", port))
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET /ws?clientId={cid} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    chunk = s.recv(1)
    if not chunk:
        sys.exit("closed during the handshake")
    head += chunk
if b" 101 " not in head.split(b"\r\n")[0]:
    sys.exit("handshake refused: " + head.decode(errors="replace"))
print("open", flush=True)
while True:
    time.sleep(3600)
