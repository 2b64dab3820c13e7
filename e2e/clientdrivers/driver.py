"""The Python client (clients/python) driven by the e2e suite (e2e/clients_scripts_test.go): one
JSON command a line on stdin, one JSON answer a line on stdout with the command's id. Commands run
concurrently (an acquire may wait on another session's close). The identity comes from the
environment (AIRLOCK_*); argv[1] is the package's location. The sessions' clock is the monotonic
clock moved forward by the command "step"."""
import json
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import airlock_client as ac  # noqa: E402

offset = [0.0]
sessions = {}
lock = threading.Lock()


def session(cmd):
    key = (cmd["session"], cmd.get("runtime", ""))
    with lock:
        if key not in sessions:
            cfg = ac.Config(runtime=cmd.get("runtime", ""), allow_plain_http=True, wait_seconds=cmd.get("waitSeconds") or 1,
                            idle_timeout=cmd.get("idleTimeout") or 0, now=lambda: time.monotonic() + offset[0])
            if cmd.get("acquireTimeout"):
                cfg.acquire_timeout = cmd["acquireTimeout"]
            sessions[key] = ac.Session(cmd["session"], cfg)
        return sessions[key]


def run(cmd):
    try:
        op = cmd["op"]
        if op == "step":
            offset[0] += cmd["seconds"]
            return {}
        s = session(cmd)
        if op == "acquire":
            sb = s.acquire(cmd["handle"])
            return {"claim": sb.claim, "phase": sb.answer.get("phase"), "mcpUrl": sb.mcp_url, "authorization": sb.authorization}
        if op == "renew":
            return {"sent": s.renew(cmd["handle"])}
        if op == "close":
            return {"closed": len(s.close().get("claims", []))}
        return {"error": {"class": "unknown op %r" % op}}
    except ac.AcquireTimeout as err:
        return {"error": {"class": type(err).__name__, "phase": err.phase, "reason": err.reason, "message": str(err)}}
    except ac.APIError as err:
        return {"error": {"class": type(err).__name__, "status": err.status, "code": err.code, "reason": err.reason,
                          "message": str(err)}}
    except ac.AirlockError as err:
        return {"error": {"class": type(err).__name__, "message": str(err)}}


out = threading.Lock()


def answer(cmd):
    got = run(cmd)
    got["id"] = cmd["id"]
    with out:
        sys.stdout.write(json.dumps(got) + "\n")
        sys.stdout.flush()


for line in sys.stdin:
    threading.Thread(target=answer, args=(json.loads(line),)).start()
