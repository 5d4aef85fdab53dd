"""What the plugin's start leaves unimported until after its first Synchronize answer (issue
34: launch -> synchronized): the modules its first checkpoint write (json, zlib) and its path
objects (pathlib, with urllib.parse and ipaddress) would bring."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LATER = ("json", "zlib", "pathlib", "urllib.parse", "ipaddress")


def test_the_start_imports_neither_json_nor_pathlib_before_the_synchronize_answer(tmp_path):
    """A plugin built as the command builds it (the config file loaded, the fixture
    machine discovered, its checkpoints restored, configured) answers a Synchronize without
    json, zlib or pathlib; the checkpoint written after the answer imports json and zlib, and
    reading it back works."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                   f"stateDirectory: {tmp_path}/state\n")
    code = (
        "import asyncio, sys\n"
        f"LATER = {LATER!r}\n"
        "from nri_cpumgr.api import nri_pb2\n"
        "from nri_cpumgr.config import load_config\n"
        "from nri_cpumgr.runtime.plugin import Plugin\n"
        "from nri_cpumgr.sysfs import discover\n"
        f"cfg = load_config({str(cfg)!r})\n"
        f"m = discover({str(REPO / 'tests/fixtures/sysfs/multi-l3')!r})\n"
        "async def main():\n"
        "    p = Plugin(cfg, m)\n"
        "    p.configure(nri_pb2.ConfigureRequest(runtime_name='containerd',\n"
        "                                         runtime_version='v2.4.2'))\n"
        "    p.synchronize([], [])\n"
        "    print(*[n for n in LATER if n in sys.modules] or ['none'])\n"
        "    await asyncio.sleep(0.05)\n"
        "    p.close()\n"
        "    print('json' in sys.modules, 'zlib' in sys.modules)\n"
        "asyncio.run(main())\n"
        "print(Plugin(cfg, m).checkpoint.load() is not None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.stdout.split() == ["none", "True", "True", "True"], out.stderr[-2000:]
