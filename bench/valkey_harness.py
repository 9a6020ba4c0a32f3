"""Shared by the bench scripts (bench.py, profile.py, budget.py,
lease_bench.py): a tiny RESP client and a throwaway valkey-server with the
ratelimit module loaded. Python 3 stdlib only."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, "bench")
# Where the benchmarks write their dated reports.
RESULTS_DIR = os.path.join(BENCH_DIR, "results")


class RespError(Exception):
    """An error reply from the server (the text after '-')."""


class Client:
    """Minimal RESP2 client: send commands, read replies (ints, strings,
    arrays, nil); error replies come back as RespError instances when
    `raise_errors` is False, otherwise they are raised."""

    def __init__(self, port, host="127.0.0.1", timeout=120.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    @staticmethod
    def _encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, bytes):
                b = a
            else:
                b = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("bad RESP reply: %r" % line[:80])

    def call(self, *args, raise_errors=True):
        self.sock.sendall(self._encode(args))
        r = self._reply()
        if raise_errors and isinstance(r, RespError):
            raise r
        return r

    def send(self, *commands):
        """Pipeline: send several commands at once; `read` their replies."""
        self.sock.sendall(b"".join(self._encode(c) for c in commands))

    def read(self):
        """The next reply of a pipeline; an error reply is raised."""
        r = self._reply()
        if isinstance(r, RespError):
            raise r
        return r

    def info(self, section):
        """INFO <section> as a dict of field -> string value."""
        out = {}
        for line in self.call("INFO", section).splitlines():
            if line and not line.startswith("#") and ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out


def server_binary():
    """$VALKEY_SERVER, else whatever scripts/valkey-server.sh finds."""
    script = os.path.join(REPO, "scripts", "valkey-server.sh")
    out = subprocess.run([script], check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip()


def module_path():
    p = os.environ.get("RL_MODULE") or os.path.join(
        REPO, "target", "release", "libvalkey_ratelimit.so")
    p = os.path.abspath(p)
    if not os.path.isfile(p):
        sys.exit("module not found: %s (run `cargo build --release` or set RL_MODULE)" % p)
    return p


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A valkey-server on a free loopback port, in its own temp dir (which is
    also its `dir`, so an AOF switched on at run time lands there). Use as a
    context manager: the server is stopped and the dir removed on exit, also
    on error or Ctrl-C/SIGTERM."""

    def __init__(self, extra_args=(), keep_dir=False, wrapper=(), start_timeout=15):
        self.binary = server_binary()
        # A command the server runs under (valgrind, for bench/profile.py).
        self.wrapper = list(wrapper)
        self.start_timeout = start_timeout
        self.module = module_path()
        self.extra = list(extra_args)
        self.keep_dir = keep_dir or bool(os.environ.get("BENCH_KEEP_DIR"))
        self.proc = None
        self.dir = None
        self.port = None

    def __enter__(self):
        self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            self.start()
        except BaseException:
            self.stop()
            signal.signal(signal.SIGTERM, self._old_term)
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        signal.signal(signal.SIGTERM, self._old_term)
        return False

    def start(self):
        tmp_root = os.path.join(BENCH_DIR, "tmp")
        os.makedirs(tmp_root, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="server-", dir=tmp_root)
        self.log = os.path.join(self.dir, "server.log")
        last = None
        for _attempt in range(5):
            self.port = free_port()
            args = self.wrapper + [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", self.dir,
                "--save", "",
                "--appendonly", "no",
                "--enable-debug-command", "local",
                "--loadmodule", self.module,
            ] + self.extra
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    args, cwd=self.dir, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT)
            deadline = time.time() + self.start_timeout
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    c = Client(self.port, timeout=5)
                    try:
                        if c.call("PING") == "PONG":
                            return
                    finally:
                        c.close()
                except (OSError, RespError):
                    time.sleep(0.05)
            last = self.log_tail()
            self._kill()
            if "Address already in use" not in last:
                break
        raise RuntimeError("valkey-server did not start; log tail:\n" + (last or ""))

    def log_tail(self, n=30):
        try:
            with open(self.log, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _kill(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                c = Client(self.port, timeout=5)
                c.sock.sendall(Client._encode(["SHUTDOWN", "NOSAVE"]))
                c.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self.dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def client(self):
        return Client(self.port)

    def version(self):
        c = self.client()
        try:
            info = c.info("server")
        finally:
            c.close()
        return info.get("valkey_version") or info.get("redis_version", "?")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def load_script(client, name):
    """SCRIPT LOAD bench/lua/<name>.lua; None when the file does not exist."""
    path = os.path.join(BENCH_DIR, "lua", name + ".lua")
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return client.call("SCRIPT", "LOAD", f.read())


LIBRARY = os.path.join(REPO, "functions", "ratelimit.lua")


def load_library(client):
    """FUNCTION LOAD REPLACE functions/ratelimit.lua, the module's commands
    as a FUNCTION library (`FCALL rl_admit ...`); returns its name."""
    with open(LIBRARY, "rb") as f:
        return client.call("FUNCTION", "LOAD", "REPLACE", f.read())
