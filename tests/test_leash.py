"""Whatever ends llmcompare, kill -9 included, no process of an engine it started is left (issue 27 item 5): the
watchdog (engines/process.Leash) stops the server's whole process group once llmcompare is gone."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from test_e2e_vllm import scenario_file

from llmcompare.engines.server import free_port, port_in_use

FAKE = Path(__file__).resolve().parent / "fakeserver.py"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def gone_within(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not group_alive(pgid)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from llmcompare.engines.process import OwnedProcess
    from llmcompare.engines.server import ServerProcess
    what, port, log = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    # a server that forks: a grandchild beside it in its group, as vLLM's EngineCore and Worker are
    cmd = ["sh", "-c", f"sleep 1000 & exec {sys.executable} {sys.argv[4]} {port}"]
    owned = ServerProcess("fake", cmd, log, "127.0.0.1", port) if what == "server" else OwnedProcess(cmd, log)
    with owned as p:
        leash = getattr(owned, "_leash", None)
        print(p.proc.pid, leash.proc.pid if leash else 0, flush=True)
        if sys.argv[5] == "kill-me":
            time.sleep(1000)
    print("done", flush=True)
""")


@pytest.mark.parametrize("what", ["server", "owned"])
def test_kill_9_of_the_owner_leaves_no_process_of_the_group(tmp_path, what):
    port = free_port()
    owner = subprocess.Popen([sys.executable, "-c", OWNER, what, str(port), str(tmp_path / "log"), str(FAKE),
                              "kill-me"], stdout=subprocess.PIPE, text=True)
    pgid, _ = map(int, owner.stdout.readline().split())
    try:
        time.sleep(0.5)
        assert group_alive(pgid)
        owner.kill()  # SIGKILL: no clean-up of its own runs
        owner.wait()
        assert gone_within(pgid, 20), f"processes of group {pgid} are left after the owner was killed"
        if what == "server":
            assert not port_in_use("127.0.0.1", port)
    finally:
        kill_group(pgid)


def test_a_normal_stop_is_not_slowed_and_leaves_no_watchdog(tmp_path):
    port = free_port()
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", OWNER, "server", str(port), str(tmp_path / "log"), str(FAKE), "stop"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "done", p.stderr
    assert time.monotonic() - t < 20
    pgid, watchdog = map(int, p.stdout.splitlines()[0].split())
    assert not group_alive(pgid) and watchdog
    with pytest.raises(ProcessLookupError):  # the watchdog was told the group is gone, exited and was reaped
        os.kill(watchdog, 0)


@pytest.mark.vllm
def test_kill_9_of_serve_bench_stops_the_real_vllm_server_and_frees_its_port(tmp_path, vllm_py, tiny_model, cli):
    f = scenario_file(tmp_path, vllm_py, tiny_model, concurrency=[1])
    data = yaml.safe_load(f.read_text())
    data["workload"].update(num_prompts=200, output_len=64)  # still measuring when it is killed
    f.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen([*cli, "serve-bench", str(f)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    pid = None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
            eng = json.loads(runs[0].read_text()).get("engines", {}).get("vllm-cpu", {}) if runs else {}
            if eng.get("status") == "running" and eng.get("pid"):
                pid, url = eng["pid"], eng["base_url"]
                break
            time.sleep(0.2)
        assert pid, "the server never came up: " + (proc.stderr.read()[-3000:] if proc.poll() is not None else "")
        assert group_alive(pid)
        proc.kill()  # kill -9 llmcompare
        proc.wait()
        assert gone_within(pid, 30), f"vLLM processes (group {pid}) are left after kill -9 of llmcompare"
        port = int(url.rsplit(":", 1)[1])
        assert not port_in_use("127.0.0.1", port)
        out = subprocess.run(["pgrep", "-f", f"vllm.entrypoints.cli.main serve {tiny_model}"], capture_output=True,
                             text=True)
        assert out.stdout.strip() == "", "a vLLM process was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid:
            kill_group(pid)
