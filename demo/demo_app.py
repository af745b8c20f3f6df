"""The demo application: keeps writing to its block devices and obeys freeze/thaw.

    python -m demo.demo_app run --device /dev/xvda [--device /dev/xvdb] [--interval 0.01]
    python -m demo.demo_app run --file /data/records.dat [--file-size 4194304]  # on a filesystem
    python -m demo.demo_app freeze [--timeout 10]   # (by exec) returns once no write can happen
    python -m demo.demo_app thaw
    python -m demo.demo_app status                  # JSON: frozen, writes, last write time
    python -m demo.demo_app verify --device PATH    # every record on the device is intact

``run`` writes 4 KiB records round-robin over its devices, each
``b"DEMOREC1" | seq (u64) | time ns (u64) | device index (u32) | crc32 of the rest | payload``,
at pseudo-random 4 KiB-aligned offsets, and fsyncs each. It prints one log line per write
(``write seq=N device=D offset=O t=NS``) and per state change (``frozen t=NS``, ``thawed t=NS``),
so a test can prove from the pod log that no write happened between a freeze and its thaw.
The control channel is a UNIX socket at ``$DEMO_APP_CONTROL`` (default
``/tmp/demo-app-$POD_NAME.sock``); ``freeze`` answers only after the in-flight write finished.
``verify`` reads a (restored) device and checks every record's checksum: no torn writes.
``--file`` is the same on a filesystem (a Filesystem-mode PVC, e.g. a Windows workload's NTFS volume):
the file is created at ``--file-size`` bytes when missing, then written like a device (``verify
--device FILE`` checks it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import zlib

RECORD = 4096
MAGIC = b"DEMOREC1"
_HEAD = struct.Struct("<8sQQII")  # magic, seq, time ns, device index, crc32


IMAGE = "localcluster-demo-app"  # the local kubelet maps it to ``python -m demo.demo_app``
CONTROL_DIR = "/run/demo"


def pod_manifest(
    name: str,
    devices: dict[str, str],
    *,
    mounts: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    interval: float | None = None,
    image: str = IMAGE,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
) -> dict:
    """A pod running the demo app: ``devices`` maps Block PVC names to their devicePath, ``mounts`` maps
    Filesystem PVC names to a mount directory (the app writes ``<dir>/records.dat`` there). The control
    socket lives in an emptyDir, so ``freeze``/``thaw`` by exec reach this pod's writer."""
    mounts = dict(mounts or {})
    args = ["run"]
    for device in devices.values():
        args += ["--device", device]
    for directory in mounts.values():
        args += ["--file", f"{directory}/records.dat"]
    if interval is not None:
        args += ["--interval", str(interval)]
    volumes = [{"name": pvc, "persistentVolumeClaim": {"claimName": pvc}} for pvc in [*devices, *mounts]]
    metadata: dict = {"name": name, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    container: dict = {
        "name": "app",
        "image": image,
        "args": args,
        "env": [{"name": "DEMO_APP_CONTROL", "value": f"{CONTROL_DIR}/control.sock"}],
        "volumeMounts": [
            {"name": "control", "mountPath": CONTROL_DIR},
            *({"name": pvc, "mountPath": path} for pvc, path in mounts.items()),
        ],
    }
    if devices:
        container["volumeDevices"] = [{"name": pvc, "devicePath": path} for pvc, path in devices.items()]
    spec: dict = {"containers": [container], "volumes": [*volumes, {"name": "control", "emptyDir": {}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"metadata": metadata, "spec": spec}


def control_path() -> str:
    return os.environ.get("DEMO_APP_CONTROL") or f"/tmp/demo-app-{os.environ.get('POD_NAME', 'local')}.sock"


def make_record(seq: int, device_index: int, rng: random.Random) -> bytes:
    payload = rng.randbytes(RECORD - _HEAD.size)
    now = time.time_ns()
    crc = zlib.crc32(struct.pack("<QQI", seq, now, device_index) + payload)
    return _HEAD.pack(MAGIC, seq, now, device_index, crc) + payload


def check_record(block: bytes) -> bool | None:
    """True: an intact record; False: a damaged one; None: not a record (never written)."""
    if not block.startswith(MAGIC):
        return None
    _magic, seq, now, dev, crc = _HEAD.unpack_from(block)
    return zlib.crc32(struct.pack("<QQI", seq, now, dev) + block[_HEAD.size :]) == crc


class Writer:
    def __init__(self, devices: list[str], interval: float, seed: int) -> None:
        self.fds = [os.open(d, os.O_RDWR) for d in devices]
        self.sizes = [os.lseek(fd, 0, os.SEEK_END) for fd in self.fds]
        self.interval = interval
        self.rng = random.Random(seed)
        self.lock = threading.Lock()  # held for each write; freeze takes it too
        self.frozen = False
        self.thawed = threading.Event()
        self.thawed.set()
        self.stop = threading.Event()
        self.seq = 0
        self.last_write_ns = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.thawed.wait()
            with self.lock:
                if self.frozen:
                    continue
                index = self.seq % len(self.fds)
                blocks = max(1, self.sizes[index] // RECORD)
                offset = self.rng.randrange(blocks) * RECORD
                record = make_record(self.seq, index, self.rng)
                os.pwrite(self.fds[index], record, offset)
                os.fsync(self.fds[index])
                self.last_write_ns = _HEAD.unpack_from(record)[2]
                print(f"write seq={self.seq} device={index} offset={offset} t={self.last_write_ns}", flush=True)
                self.seq += 1
            self.stop.wait(self.interval)

    def freeze(self) -> str:
        with self.lock:  # waits for a write in progress to finish and be fsynced
            self.frozen = True
            self.thawed.clear()
            print(f"frozen t={time.time_ns()}", flush=True)
        return "frozen"

    def thaw(self) -> str:
        with self.lock:
            self.frozen = False
            print(f"thawed t={time.time_ns()}", flush=True)
        self.thawed.set()
        return "thawed"

    def status(self) -> str:
        return json.dumps({"frozen": self.frozen, "writes": self.seq, "last_write_ns": self.last_write_ns})


def serve_control(writer: Writer, path: str) -> socketserver.UnixStreamServer:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            command = self.rfile.readline().decode().strip()
            action = {"freeze": writer.freeze, "thaw": writer.thaw, "status": writer.status}.get(command)
            self.wfile.write(((action() if action else f"unknown command {command!r}") + "\n").encode())

    if os.path.exists(path):
        os.unlink(path)
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def send(command: str, timeout: float) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(control_path())
        sock.sendall(command.encode() + b"\n")
        return sock.makefile().readline().strip()


def verify(device: str) -> dict:
    records = damaged = 0
    with open(device, "rb") as f:
        offset = 0
        while block := f.read(RECORD):
            ok = check_record(block)
            if ok is not None:
                records += 1
                damaged += not ok
                if not ok:
                    print(f"damaged record at offset {offset}", file=sys.stderr)
            offset += len(block)
    return {"records": records, "damaged": damaged}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo-app")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--device", action="append", default=[])
    run.add_argument("--file", action="append", default=[])
    run.add_argument("--file-size", type=int, default=4 << 20)
    run.add_argument("--interval", type=float, default=0.01)
    run.add_argument("--seed", type=int, default=int(time.time()))
    for name in ("freeze", "thaw", "status"):
        sub.add_parser(name).add_argument("--timeout", type=float, default=10.0)
    sub.add_parser("verify").add_argument("--device", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        if not args.device and not args.file:
            parser.error("run needs --device or --file")
        for path in args.file:
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.truncate(args.file_size)
        writer = Writer(args.device + args.file, args.interval, args.seed)
        signal.signal(signal.SIGTERM, lambda *_: writer.stop.set() or writer.thawed.set())
        server = serve_control(writer, control_path())
        print(f"demo-app writing to {', '.join(args.device + args.file)}; control socket {control_path()}", flush=True)
        try:
            writer.run()
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
        return 0
    if args.command == "verify":
        result = verify(args.device)
        print(json.dumps(result))
        return 0 if result["damaged"] == 0 else 1
    try:
        answer = send(args.command, args.timeout)
    except OSError as err:
        print(f"demo-app: cannot reach the writer at {control_path()}: {err}", file=sys.stderr)
        return 2
    print(answer)
    return 0 if answer in ("frozen", "thawed") or args.command == "status" else 1


if __name__ == "__main__":
    sys.exit(main())
