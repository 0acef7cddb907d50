"""A process that only hosts a TCPStore, so a drill can kill the store's host on its own.

Worker side (standard library and torch only). It binds a free port, writes the port to
``--port-file`` once the store listens, then sleeps until it is killed.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="torchcanary.worker.drill.store_host")
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    import torch.distributed as dist

    store = dist.TCPStore(
        args.host,
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=300),
    )
    partial = args.port_file.with_suffix(".tmp")
    partial.write_text(str(store.port))
    partial.replace(args.port_file)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
