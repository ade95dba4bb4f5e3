"""Reads TensorBoard event files as an independent reader: TFRecord framing and CRC-32C checked here,
Events parsed by Python's protobuf (Debian's python3-protobuf) from datasets/tensorboard_event.proto
compiled at test time with protoc --python_out.

usage: read_tensorboard_events.py PROTO_DIR LOG_DIR
Prints one JSON object: {"train": [...], "validation": [...]}, each a list of
{"file": name, "wall_time": x, "step": n, "file_version": s, "scalars": {tag: value}} in file-name order.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def masked_crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        header = data[at:at + 12]
        if len(header) != 12:
            raise ValueError(f"{path}: torn header at byte {at}")
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:])
        if masked_crc32c(header[:8]) != length_crc:
            raise ValueError(f"{path}: length CRC mismatch at byte {at}")
        body = data[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked_crc32c(body) != data_crc:
            raise ValueError(f"{path}: data CRC mismatch at byte {at}")
        yield body
        at += 16 + length


def main():
    proto_dir, log_dir = sys.argv[1], sys.argv[2]
    out_dir = tempfile.mkdtemp()
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={out_dir}",
                    os.path.join(proto_dir, "tensorboard_event.proto")], check=True)
    sys.path.insert(0, out_dir)
    import tensorboard_event_pb2  # noqa: E402

    result = {}
    for run in ("train", "validation"):
        events = []
        run_dir = os.path.join(log_dir, run)
        names = sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []
        for name in names:
            for body in records(os.path.join(run_dir, name)):
                event = tensorboard_event_pb2.Event()
                event.ParseFromString(body)
                events.append({
                    "file": name,
                    "wall_time": event.wall_time,
                    "step": event.step,
                    "file_version": event.file_version if event.WhichOneof("what") == "file_version" else None,
                    "scalars": {v.tag: v.simple_value for v in event.summary.value},
                })
        result[run] = events
    print(json.dumps(result))


if __name__ == "__main__":
    main()
