"""Guess webhook credentials against a real `clawtower serve` and check the rate limit holds.

Starts `clawtower serve --port 0` on a throw-away CLAWTOWER_HOME and store, then sends
1,000 requests with wrong bearer tokens from 127.0.0.1 interleaved with 200 correctly
authenticated ones from 127.0.0.2 (both loopback; nothing leaves the machine), five bad
requests then one valid, in turn. Passes when >= 95% of the bad requests after the 20th are
answered 429 and 200/200 valid ones are accepted (202), and the refusals are in the store's
events. With `--spread N` the bad requests come round-robin from N loopback addresses
(127.0.1.x): then at most 100 (the per-trigger limit) + N may be answered 401. Bounded: a
fixed request count and an overall deadline; the server is stopped at the end. README's
security section quotes its output.

    .venv/bin/python scripts/webhook_bruteforce.py [--bad N] [--valid N] [--spread N]
                                                   [--deadline S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLAWTOWER = Path(sys.executable).with_name("clawtower")
PORT_RE = re.compile(r"webhooks on http://127\.0\.0\.1:(\d+)/")
LIMIT = 20  # serve's default --auth-failures
TRIGGER_LIMIT = 100  # and --auth-trigger-failures


def start(home: Path, db: Path, deadline: float) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "CLAWTOWER_HOME": str(home), "CLAWTOWER_OPERATOR": "bruteforce"}
    proc = subprocess.Popen([str(CLAWTOWER), "serve", "--db", str(db), "--host", "127.0.0.1",
                             "--port", "0"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = PORT_RE.search(line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    raise SystemExit("serve did not report its webhook port")


async def attack(port: int, bad: int, valid: int, deadline: float, spread: int
                 ) -> dict[str, object]:
    import httpx

    from tests.helpers.hook_expert import TOKEN

    url = f"http://127.0.0.1:{port}/hooks/hook-expert/inbound"
    addresses = ["127.0.0.1"] if spread == 1 else [f"127.0.1.{i}" for i in range(1, spread + 1)]
    attackers = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=a),
                                   timeout=30) for a in addresses]
    sender = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2"),
                               timeout=30)
    every = max(1, (bad + valid) // max(1, valid))  # one valid request in each `every`
    bad_codes: list[int] = []
    valid_codes: list[int] = []
    retry_after: set[str] = set()
    started = time.monotonic()
    try:
        i = 0
        while len(bad_codes) < bad or len(valid_codes) < valid:
            if time.monotonic() > deadline:
                raise SystemExit("deadline passed before all requests were sent")
            send_valid = len(valid_codes) < valid and (i % every == every - 1
                                                        or len(bad_codes) >= bad)
            body = {"event_id": f"e-{i}", "contact_id": f"c-{i % 7}"}
            if send_valid:
                r = await sender.post(url, json=body,
                                      headers={"Authorization": f"Bearer {TOKEN}"})
                valid_codes.append(r.status_code)
            else:
                attacker = attackers[len(bad_codes) % len(attackers)]
                r = await attacker.post(url, json=body, headers={
                    "Authorization": f"Bearer guess-{i:06d}-xxxxxxxxxxxxxxxx"})
                bad_codes.append(r.status_code)
                if r.status_code == 429:
                    retry_after.add(r.headers.get("retry-after", "?"))
            i += 1
    finally:
        for a in attackers:
            await a.aclose()
        await sender.aclose()
    after = bad_codes[LIMIT:]
    return {"attacker_addresses": len(addresses), "bad": len(bad_codes),
            "bad_401": bad_codes.count(401), "bad_429": bad_codes.count(429),
            "bad_after_20th": len(after), "bad_after_20th_429": after.count(429),
            "bad_after_20th_429_pct": round(100.0 * after.count(429) / max(1, len(after)), 1),
            "valid": len(valid_codes), "valid_202": valid_codes.count(202),
            "retry_after_values": sorted(retry_after)[:5],
            "elapsed_s": round(time.monotonic() - started, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bad", type=int, default=1000)
    p.add_argument("--valid", type=int, default=200)
    p.add_argument("--spread", type=int, default=1, metavar="N",
                   help="send the bad requests round-robin from N loopback addresses"
                   " (127.0.1.1..N; the per-trigger limit's case)")
    p.add_argument("--deadline", type=float, default=300.0, help="give up after S seconds")
    args = p.parse_args()
    if not (LIMIT < args.bad <= 100_000 and 1 <= args.valid <= 10_000
            and 1 <= args.spread <= 250):
        raise SystemExit(f"--bad must be {LIMIT + 1}..100000, --valid 1..10000,"
                         " --spread 1..250")
    deadline = time.monotonic() + args.deadline
    with tempfile.TemporaryDirectory(prefix="ct-bruteforce-") as tmp:
        home, db = Path(tmp) / "home", Path(tmp) / "b.db"
        os.environ["CLAWTOWER_HOME"] = str(home)
        from tests.helpers.hook_expert import install_hook_expert

        install_hook_expert(Path(tmp))
        proc, port = start(home, db, deadline)
        try:
            out = asyncio.run(attack(port, args.bad, args.valid, deadline, args.spread))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        con = sqlite3.connect(db)
        out["events_auth_failed"], out["events_throttled"] = con.execute(
            "SELECT sum(type='trigger.auth_failed'), sum(type='trigger.auth_throttled')"
            " FROM events").fetchone()
        out["queued_or_done"] = con.execute(
            "SELECT count(*) FROM trigger_items WHERE status!='skipped'").fetchone()[0]
        con.close()
        listing = subprocess.run([str(CLAWTOWER), "triggers", "list", "--db", str(db)],
                                 capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "CLAWTOWER_HOME": str(home)})
        out["triggers_list"] = [ln for ln in listing.stdout.splitlines()
                                if ln.startswith("hook-expert/inbound")]
    print(json.dumps(out, indent=2))
    if args.spread == 1:  # one address: 20 tries, then 429
        limited = out["bad_after_20th_429_pct"] >= 95.0  # type: ignore[operator]
    else:  # many: the trigger's 100, then one more try per address that had none yet
        limited = out["bad_401"] <= TRIGGER_LIMIT + args.spread  # type: ignore[operator]
    ok = limited and out["valid_202"] == args.valid and out["queued_or_done"] == args.valid
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
