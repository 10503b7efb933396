"""Vendor GraphiQL's scripts and styles into ``app/graphql/graphiql/`` (served by Enverif itself).

    python tools/graphiql/update.py

Installs the versions pinned in ``package.json`` / ``package-lock.json`` here with ``npm ci``,
copies the UMD builds the page loads, and writes ``manifest.json``: each file's package,
version and sha384. The page carries that sha384 as the script's ``integrity`` attribute (the
browser refuses a file that differs) and ``tests/unit/test_graphiql_assets.py`` checks the
files against it. To move to new versions: edit the pins in ``package.json``, run
``npm install --package-lock-only`` here, then this script, and commit the result.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE.parent.parent / "app" / "graphql" / "graphiql"

# (package, file inside the package, name served) in the order the page loads them.
FILES = [
    ("react", "umd/react.production.min.js", "react.production.min.js"),
    ("react-dom", "umd/react-dom.production.min.js", "react-dom.production.min.js"),
    ("graphql-ws", "umd/graphql-ws.min.js", "graphql-ws.min.js"),
    ("graphiql", "graphiql.min.js", "graphiql.min.js"),
    ("graphiql", "graphiql.min.css", "graphiql.min.css"),
]


def sha384(data: bytes) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(data).digest()).decode()


def main() -> int:
    npm = shutil.which("npm")
    if npm is None:
        print("npm is needed: install Node.js >= 18", file=sys.stderr)
        return 1
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=HERE, check=True)
    modules = HERE / "node_modules"
    TARGET.mkdir(parents=True, exist_ok=True)
    manifest = []
    for package, source, name in FILES:
        version = json.loads((modules / package / "package.json").read_text())["version"]
        data = (modules / package / source).read_bytes()
        (TARGET / name).write_bytes(data)
        manifest.append(
            {"file": name, "package": package, "version": version, "source": source, "sha384": sha384(data)}
        )
    (TARGET / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(manifest)} files and manifest.json to {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
