"""``graywire`` command line: serve, demo, sim, replay, eval, agent, check, fakes, inventory, slurm-sync,
k8s-sync, db."""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

DEMO_FAULTS = "speed_downgrade@10s+1h,slow_channel@15s+1h=0.3"


def server_config(app: Any, settings: Any, **overrides: Any) -> Any:
    """The ``uvicorn.Config`` that ``graywire serve`` runs ``app`` with (benchmarks run it too,
    quieter: ``overrides`` replace any of its arguments)."""
    import uvicorn

    from graywire.service.http_protocol import head_deadline_protocol

    http = settings.http
    kwargs: dict[str, Any] = dict(
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=http.access_log,
        # h11, never httptools even where it is installed: h11 bounds the request head while it
        # arrives (h11_max_incomplete_event_size); httptools keeps growing it. Each head must
        # also arrive within http.header_timeout, and a peer may hold at most
        # http.max_connections_per_client connections.
        http=head_deadline_protocol(http.header_timeout.total_seconds(), http.max_connections_per_client),
        limit_concurrency=http.max_connections,
        timeout_keep_alive=max(1, round(http.keep_alive.total_seconds())),
        h11_max_incomplete_event_size=http.max_header_bytes,
    )
    tls = settings.tls
    if tls.enabled:
        kwargs |= dict(ssl_certfile=str(tls.certfile), ssl_keyfile=str(tls.keyfile))
        if tls.client_ca is not None:  # mutual TLS: no certificate signed by it, no handshake
            kwargs |= dict(ssl_ca_certs=str(tls.client_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return uvicorn.Config(app, **(kwargs | overrides))


def _serve(settings: Any, banner: str | None = None) -> int:
    import uvicorn

    from graywire.service.app import create_app
    from graywire.service.memory_habits import freeze_long_lived

    app = create_app(settings)
    freeze_long_lived()  # the fabric, its maps and the detectors live as long as the process
    if banner:
        print(banner, flush=True)
    uvicorn.Server(server_config(app, settings)).run()
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from graywire.service.config import load_settings

    settings = load_settings(args.config, host=args.host, port=args.port)
    return _serve(settings)


def cmd_demo(args: argparse.Namespace) -> int:
    from graywire.service.config import load_settings

    settings = load_settings(
        None,
        port=args.port,
        data_dir=args.data_dir,
        poll_interval="2s",
        sources=[{"type": "fabricsim", "hosts": args.hosts, "seed": args.seed, "faults": DEMO_FAULTS}],
        drain={"shadow": False},  # the demo shows drains happening; a real install starts in shadow
    )
    from graywire.service.simulated import FabricSimCollector

    preview = FabricSimCollector(settings.sources[0], settings.poll_seconds)
    base = f"http://{settings.host}:{settings.port}"
    lines = [
        f"graywire demo: {args.hosts} hosts, {preview.fabric.n_ports} ports, polled every 2 s",
        f"  database {settings.db_url}, archive {settings.archive_dir}",
        "  injected (silent, nothing goes down):",
    ]
    for f in preview.faults:
        where = (
            f.port if f.kind != "slow_channel" else f"{f.node} rank {f.rank} channel {f.channel} ({f.port})"
        )
        lines.append(f"    t+{f.start_s:.0f}s  {f.kind:<16} {where}")
    lines += [
        "  within a minute, look at:",
        f"    {base}/  (the status page)",
        f"    curl -s {base}/api/v1/incidents | python3 -m json.tool",
        f"    curl -s {base}/api/v1/drain | python3 -m json.tool   (nodes to drain, and why)",
        f"    curl -s {base}/metrics | grep ^graywire_",
        f"    {base}/docs  (the API)",
    ]
    return _serve(settings, "\n".join(lines))


def cmd_sim(args: argparse.Namespace) -> int:
    from graywire.collectors.units import parse_duration
    from graywire.fabricsim.output import write_simulation
    from graywire.fabricsim.sim import FabricSim, SimConfig
    from graywire.fabricsim.topology import TopologySpec

    cfg = SimConfig(
        topology=TopologySpec(hosts=args.hosts, gpus=args.gpus),
        interval_s=parse_duration(args.interval),
        duration_s=parse_duration(args.duration),
        seed=args.seed,
        faults=args.faults,
        channels=args.channels,
        job_hosts=args.job_hosts,
    )
    t0 = time.perf_counter()
    sim = FabricSim(cfg)
    bar = tqdm(total=sim.n_steps, unit="poll", desc="simulating", disable=args.quiet or None, file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.update(done - bar.n)

    rows = write_simulation(sim, args.out, progress)
    bar.close()
    dt = time.perf_counter() - t0
    print(
        f"wrote {args.out}: {sim.fabric.n_ports} ports, {sim.n_steps} polls, "
        f"{rows['port_sample']:,} port samples, {rows['nccl_timing']:,} NCCL rows, "
        f"{len(sim.faults)} faults in truth.json ({dt:.1f} s)"
    )
    return 0


def ber_thresholds(args: argparse.Namespace) -> str | None:
    """``--ber-thresholds``, else the service's ``ber_thresholds`` setting from the environment
    (``GRAYWIRE_BER_THRESHOLDS``), which the settings module reads, when the command runs."""
    from graywire.service.config import env_setting

    return args.ber_thresholds or env_setting("ber_thresholds")


def cmd_replay(args: argparse.Namespace) -> int:
    from graywire.collectors.dataset import iter_replay, open_files
    from graywire.collectors.model import INVENTORY, load_inventory
    from graywire.detectors.ber_thresholds import ThresholdTable
    from graywire.detectors.pipeline import Pipeline, default_detectors
    from graywire.evaluation.scoring import score
    from graywire.fabricsim.output import TRUTH

    root = Path(args.dir)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory")
    inv = Path(args.inventory) if args.inventory else root / INVENTORY
    if not inv.exists():
        raise ValueError(f"no inventory: {inv} is missing (pass --inventory FILE)")
    fabric = load_inventory(inv)
    ber = ber_thresholds(args)
    table = ThresholdTable.load(ber) if ber else None
    pipe = Pipeline(fabric, default_detectors(fabric, table))
    findings = []
    polls = 0
    t0 = time.perf_counter()
    for batch in tqdm(
        iter_replay(root), unit="batch", desc="replaying", disable=args.quiet or None, file=sys.stderr
    ):
        polls += 1
        for f in pipe.process(batch):
            findings.append(f)
            if not args.json and not args.quiet:
                tqdm.write(
                    f"{f.time:%Y-%m-%d %H:%M:%S} {f.status:<8} {f.kind:<18} {f.node or '-':<14} {f.summary}"
                )
    elapsed = time.perf_counter() - t0
    report: dict[str, Any] = {
        "batches": polls,
        "findings": len([f for f in findings if f.status == "firing"]),
        "seconds": round(elapsed, 2),
        "stages": {k: vars(v) for k, v in pipe.stats.items()},
    }
    truth_path = root / TRUTH
    if truth_path.exists():
        truth = json.loads(truth_path.read_text())
        report["score"] = score(findings, truth, pipe.kinds).as_dict()
    report["ber_thresholds"] = ber or "generic PAM4 rule"
    still_open = open_files(root)
    report["open_files"] = len(still_open)
    note = _replay_note(root, polls, still_open)
    if note:
        report["note"] = note
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        _print_report(report)
    return 0


def _replay_note(root: Path, batches: int, still_open: list[Path]) -> str | None:
    """Why a replay found less than the directory seems to hold: files still open, or none."""
    if still_open:
        n = len(still_open)
        hours = sorted({p.parent.name.removeprefix("hour=") for p in still_open})
        files = f"{n} file{'s' if n > 1 else ''} of hour{'s' if len(hours) > 1 else ''} {', '.join(hours)}"
        what = f"0 batches: {files}" if batches == 0 else f"not replayed: {files}"
        return (
            f"{what} {'are' if n > 1 else 'is'} still being written (*.parquet.tmp: the archive is live); "
            "replay reads closed files only. The service closes them every archive.roll (5m by default), "
            "at the turn of the hour and when it stops: replay again then"
        )
    if batches == 0:
        return f"0 batches: {root} holds no closed <record>/hour=*/*.parquet file"
    return None


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if pct else f"{v:.1f}"


def _print_report(report: dict[str, Any]) -> None:
    print(f"\n{report['batches']} batches, {report['findings']} findings opened, {report['seconds']} s")
    print(f"BER judged against: {report['ber_thresholds']}")
    if report.get("note"):
        print(f"note: {report['note']}")
    sc = report.get("score")
    if not sc:
        print("no truth.json: nothing to score against")
        return
    print(f"\n{'fault':<18}{'n':>4}{'recall':>9}{'loc@1':>8}{'delay p50':>11}{'delay p95':>11}")
    for kind, s in sc["by_fault"].items():
        if not s["faults"]:
            continue
        if not s["covered"]:
            print(f"{kind:<18}{s['faults']:>4}   (no detector for this fault yet)")
            continue
        print(
            f"{kind:<18}{s['faults']:>4}{_fmt(s['recall'], True):>9}{_fmt(s['localization_top1'], True):>8}"
            f"{_fmt(s.get('delay_median_s')):>10}s{_fmt(s.get('delay_p95_s')):>10}s"
        )
    o, fd = sc["overall"], sc["findings"]
    print(
        f"\noverall precision {_fmt(o['precision'], True)}  recall {_fmt(o['recall'], True)}  "
        f"F1 {_fmt(o['f1'], True)}"
    )
    print(
        f"findings: {fd['true']} true, {fd['false']} false, {fd['benign_alarms']} on benign events "
        f"({_fmt(sc['false_per_1000_port_hours'])} false per 1,000 port-hours)"
    )
    for ex in sc["false_examples"]:
        print(f"  {ex['why']}: {ex['time']} {ex['kind']} {ex['entity']}")


def cmd_eval(args: argparse.Namespace) -> int:
    from graywire.detectors.ber_thresholds import ThresholdTable
    from graywire.evaluation.suite import evaluate, suite

    ber = ber_thresholds(args)
    table = ThresholdTable.load(ber) if ber else None
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip()) if args.variants else None
    scenarios = suite(quick=args.quick, seeds=args.seeds, variants=variants)
    if args.only:
        from fnmatch import fnmatch

        scenarios = [sc for sc in scenarios if fnmatch(sc.name, args.only) or sc.name.startswith(args.only)]
        if not scenarios:
            raise ValueError(f"--only {args.only!r}: no scenario name matches or starts so")
    t0 = time.perf_counter()
    total = sum(sc.polls for sc in scenarios)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(
            tqdm(total=total, unit="poll", desc="evaluating", disable=args.quiet or None, file=sys.stderr)
        )
        out = stack.enter_context(open(args.findings, "w")) if args.findings else None
        result = evaluate(scenarios, table, bar.update, out)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(result, indent=1, default=str))
    else:
        _print_eval(result)
    return 0


def _print_eval(result: dict[str, Any]) -> None:
    print(f"\nBER judged against: {result['ber_thresholds']}")
    for name, r in result["variants"].items():
        _print_variant(name, r)
    print(f"{len(result['scenarios'])} scenarios in {result['seconds']} s")


def _print_variant(name: str, r: dict[str, Any]) -> None:
    w = max([16, *(len(k) + 1 for k in r["by_fault"])])
    head = (
        f"{'fault':<{w}}{'n':>4}{'recall':>8}{'prec':>7}{'F1':>7}{'loc@1':>7}"
        f"{'p50 s':>7}{'p95 s':>7}{'p50 poll':>9}{'p95 poll':>9} | "
        f"{'base rec':>8}{'base prec':>10}{'base F1':>8}"
    )
    print(f"\nvariant {name}\n{head}\n{'-' * len(head)}")
    for kind, s in r["by_fault"].items():
        b = r["baseline"]["by_fault"].get(kind, {})
        print(
            f"{kind:<{w}}{s['faults']:>4}{_fmt(s['recall'], True):>8}{_fmt(s['precision'], True):>7}"
            f"{_fmt(s['f1'], True):>7}{_fmt(s['localization_top1'], True):>7}{_fmt(s['delay_median_s']):>7}"
            f"{_fmt(s['delay_p95_s']):>7}{_fmt(s['delay_median_polls']):>9}{_fmt(s['delay_p95_polls']):>9} | "
            f"{_fmt(b.get('recall'), True):>8}{_fmt(b.get('precision'), True):>10}"
            f"{_fmt(b.get('f1'), True):>8}"
        )
    for name, part in (("graywire", r), ("static rules", r["baseline"])):
        o = part["overall"]
        print(
            f"{name:<13} precision {_fmt(o['precision'], True):>6}  recall {_fmt(o['recall'], True):>6}  "
            f"F1 {_fmt(o['f1'], True):>6}  false findings {part['false_findings']:>5} "
            f"({_fmt(part['false_per_1000_port_hours'])} per 1,000 port-hours; healthy soak: "
            f"{part['soak']['false_findings']} in {part['soak']['port_hours']:,.0f} port-hours)"
        )
    if r.get("not_observable"):
        print(f"not observable from these sources: {', '.join(r['not_observable'])}")


def cmd_fakes(args: argparse.Namespace) -> int:
    from graywire.collectors.units import parse_duration
    from graywire.fabricsim.live import FakesConfig, run_fakes

    cfg = FakesConfig(
        out=Path(args.out), hosts=args.hosts, seed=args.seed, faults=args.faults,
        interval_s=parse_duration(args.interval), ufm_port=args.ufm_port, snmp_port=args.snmp_port,
        agent_port=args.agent_port, agent_hosts=args.agent_hosts, service_port=args.service_port,
        discover=args.discover,
    )  # fmt: skip
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # so the fakes' snmpsim and servers are stopped on the way out

    signal.signal(signal.SIGTERM, stop)
    try:
        run_fakes(cfg, say=lambda line: print(line, flush=True))
    except RuntimeError as e:
        raise ValueError(str(e)) from e
    except KeyboardInterrupt:
        return 0  # asked to stop (Ctrl-C, kill, systemd): everything it started has stopped
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    import socket

    from graywire.collectors.host.agent_server import AgentConfig, serve_agent

    cfg = AgentConfig(
        sysfs_root=args.sysfs_root,
        hostname=args.hostname or socket.gethostname(),
        ethtool_dir=args.ethtool_dir,
        ethtool=None if args.no_ethtool else args.ethtool,
        ethtool_timeout=args.ethtool_timeout,
        include_plain_netdevs=args.include_plain_netdevs,
        exclude=args.exclude,
        perfquery=args.perfquery,
        nvidia_smi=None if args.nvidia_smi == "none" else args.nvidia_smi,
        topo_file=args.topo_file,
        ncclras=args.ncclras,
        ncclras_timeout=args.ncclras_timeout,
        ncclras_job=args.ncclras_job,
        ncclras_addresses=tuple(args.ncclras_address),
    )
    serve_agent(cfg, listen=args.listen, port=args.port, log_level=args.log_level)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """The data-path checks once on this node: exit 0 ok or skipped, 1 a finding, 2 an error."""
    from graywire.collectors.host.gpu_topo import TopoCommand, read_gpu_nic_paths
    from graywire.service.node_check import judge, table

    text = None
    if args.topo_file is not None:
        try:
            text = args.topo_file.read_text(errors="replace")
        except OSError as e:
            print(f"error: --topo-file: {e}")
            return 2
    command = None if args.nvidia_smi == "none" else TopoCommand(args.nvidia_smi, args.timeout)
    reading = read_gpu_nic_paths(args.sysfs_root, text, command)
    result = judge(reading, args.max_level, args.nics)
    if args.json:
        print(json.dumps({"status": result.status, "message": result.message, "source": reading.source,
                          "gpus": result.rows, "errors": reading.errors}, indent=1))  # fmt: skip
    else:
        for e in reading.errors:
            print(f"warning: {e}", file=sys.stderr)
        print(table(result, reading.source))
    return result.exit_code


def _ufm_topology(args: argparse.Namespace) -> tuple[Any, Any]:
    """UFM REST ports and links, fetched with the UFM source's own settings and HTTP client."""
    import os

    from graywire.collectors.ufm import UfmSourceConfig

    raw: dict[str, Any] = {"url": args.ufm, "auth": args.auth, "verify": not args.insecure}
    for key, value in (
        ("username", args.username),
        ("password_file", args.password_file),
        ("token_file", args.token_file),
        ("ca_file", args.ca_file),
    ):
        if value is not None:
            raw[key] = value
    for key, env, path_key in (
        ("password", "GRAYWIRE_UFM_PASSWORD", "password_file"),
        ("token", "GRAYWIRE_UFM_TOKEN", "token_file"),
    ):
        if os.environ.get(env) and path_key not in raw:
            raw[key] = os.environ[env]
    try:
        cfg = UfmSourceConfig.model_validate(raw)
    except Exception as e:  # pydantic's ValidationError: say it as a usage error
        raise ValueError(f"--ufm: {e}") from None
    from graywire.service.discovery import ufm_topology

    return ufm_topology(cfg.model_copy(update={"url": cfg.url or args.ufm}))


def _lldp_topology(config: Path) -> tuple[Any, Any, list[str], str]:
    """Walk LLDP on the switches of every SNMP source of a service config (its targets and
    credentials, as ``graywire serve`` would poll them); its agent sources name the host NICs."""
    from graywire.collectors.host.config import AgentSourceConfig
    from graywire.collectors.snmp import SnmpSourceConfig
    from graywire.service.config import load_settings
    from graywire.service.discovery import lldp_topology

    settings = load_settings(config)
    sources = [s for s in settings.sources if isinstance(s, SnmpSourceConfig)]
    if not sources:
        raise ValueError(f"{config}: no snmp source to walk")
    agents = [s for s in settings.sources if isinstance(s, AgentSourceConfig)]
    return lldp_topology(sources, str(config), agents)


def cmd_inventory_discover(args: argparse.Namespace) -> int:
    from graywire.collectors.discovery import (
        ExpectRule,
        PurposeRule,
        discover,
        facts_from_ibnetdiscover,
        facts_from_ufm,
    )
    from graywire.collectors.ib.ibnetdiscover import parse_ibnetdiscover

    given = [a for a in (args.ibnetdiscover, args.ufm, args.snmp) if a is not None]
    if len(given) != 1:
        raise ValueError("give one of --ibnetdiscover FILE (or -), --ufm URL and --snmp CONFIG")
    purpose = [PurposeRule.parse(r) for r in args.purpose]
    expect = [ExpectRule.parse(r) for r in args.expect]
    if args.ibnetdiscover is not None:
        name = "stdin" if args.ibnetdiscover == "-" else args.ibnetdiscover
        text = sys.stdin.read() if args.ibnetdiscover == "-" else Path(args.ibnetdiscover).read_text()
        parsed = parse_ibnetdiscover(text)
        if not parsed.ports:
            raise ValueError(f"{name}: no ibnetdiscover port lines (run ibnetdiscover or ibnetdiscover -p)")
        facts, links, notes = facts_from_ibnetdiscover(parsed)
        fmt = " and ".join(sorted(parsed.formats))
        source = f"ibnetdiscover ({fmt} format) {name}"
        for reason, count in parsed.skipped.items():
            notes.append(f"{count} line(s) skipped ({reason}), first at line(s) {parsed.skipped_lines}")
    elif args.snmp is not None:
        facts, links, notes, source = _lldp_topology(args.snmp)
    else:
        ports, cables = _ufm_topology(args)
        facts, links, notes, skipped = facts_from_ufm(ports, cables)
        source = f"UFM REST {args.ufm}"
        for reason, count in skipped.items():
            notes.append(f"{count} UFM record(s) skipped ({reason})")
    result = discover(facts, links, purpose_rules=purpose, expect_rules=expect, source=source)
    result.notes[:0] = notes
    text = result.to_yaml()
    f = result.fabric
    if args.out in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    print(
        f"discovered {len(f.node_names)} nodes, {f.n_ports} ports, {len(f.link_a)} cables from {source}"
        + (f" -> {args.out}" if args.out not in (None, "-") else ""),
        file=sys.stderr,
    )
    for n in result.notes:
        print(f"  note: {n}", file=sys.stderr)
    if result.port_notes:
        print(f"  {len(result.port_notes)} port(s) to check: search the file for CHECK", file=sys.stderr)
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    from graywire.service.config import load_settings
    from graywire.service.models.engine import upgrade

    settings = load_settings(args.config, database_url=args.database_url)
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Never the password: these lines end up in deploy logs (init containers, CI).
    shown = make_url(settings.db_url).render_as_string(hide_password=True)
    try:
        upgrade(settings.db_url)
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as e:
        reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise ValueError(f"database {shown} is unreachable: {reason}") from None
    print(f"database at head: {shown}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="graywire", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the service from a config file")
    s.add_argument("--config", help="YAML config file (default: embedded defaults)")
    s.add_argument("--host", help="listen address (overrides the config)")
    s.add_argument("--port", type=int, help="listen port (overrides the config)")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("demo", help="the service on a synthetic fabric with two injected gray failures")
    s.add_argument("--port", type=int, help="port to serve on (default $GRAYWIRE_PORT, else 8000)")
    s.add_argument("--hosts", type=int, default=256, help="simulated hosts (8 GPUs and NICs each)")
    s.add_argument("--seed", type=int, default=7, help="random seed of the fabric and its traffic")
    s.add_argument("--data-dir", default="graywire-data", help="where the SQLite database and the archive go")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("sim", help="simulate a fabric and write Parquet telemetry plus truth.json")
    s.add_argument("--hosts", type=int, default=128, help="simulated hosts")
    s.add_argument("--gpus", type=int, default=8, help="GPUs (and NICs) per host")
    s.add_argument("--duration", default="1h", help="simulated time, e.g. 1h or 30m")
    s.add_argument("--interval", default="10s", help="time between polls, e.g. 10s")
    s.add_argument(
        "--faults", default="default", help="fault spec (see docs/fabricsim.md), 'default' or 'none'"
    )
    s.add_argument(
        "--seed", type=int, default=0, help="random seed of the fabric, its traffic and the faults' targets"
    )
    s.add_argument("--channels", type=int, default=4, help="NCCL channels per rank")
    s.add_argument("--job-hosts", type=int, default=32, help="hosts per training job")
    s.add_argument(
        "--out",
        required=True,
        help="directory to write the Parquet telemetry, the inventory and truth.json into",
    )
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_sim)

    s = sub.add_parser("replay", help="run the detectors over a simulation or an archive and score them")
    s.add_argument("dir", help="a `graywire sim` output or a service archive (with its inventory)")
    s.add_argument("--inventory", help="inventory file (default: DIR/inventory.json)")
    s.add_argument(
        "--ber-thresholds",
        help="NVIDIA field BER thresholds CSV (UFM PDR plugin's Field_BER_Thresholds.csv); "
        "default $GRAYWIRE_BER_THRESHOLDS, else a generic PAM4 rule",
    )
    s.add_argument("--json", action="store_true", help="print one JSON report")
    s.add_argument("-q", "--quiet", action="store_true", help="no per-finding lines or progress")
    s.set_defaults(func=cmd_replay)

    s = sub.add_parser("eval", help="score the detectors and a static-rule baseline on a scenario suite")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--quick", action="store_true", help="smaller suite (no 1,024/4,096-host runs, 6 h soak)")
    s.add_argument(
        "--seeds", type=int, default=3, help="seeds per scenario (more: tighter figures, longer run)"
    )
    s.add_argument(
        "--variants",
        help="comma-separated source mixes to score (default all): rich, ufm_default+inspector_verbose, "
        "perfquery_legacy+inspector_verbose, host_ethtool+inspector_verbose, ufm_default+inspector_default",
    )
    s.add_argument(
        "--ber-thresholds",
        help="NVIDIA field BER thresholds CSV; default $GRAYWIRE_BER_THRESHOLDS, else a generic PAM4 rule",
    )
    s.add_argument(
        "--only",
        metavar="GLOB",
        help="only the scenarios whose name matches GLOB or starts with it ('multipath-*', 'datapath-')",
    )
    s.add_argument(
        "--findings",
        metavar="FILE",
        help="write every finding (JSON lines: scenario, time, kind, entity, where, and for a firing "
        "one whether it was at a fault: true, false or benign)",
    )
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_eval)

    from graywire.collectors.host.agent_wire import DEFAULT_AGENT_PORT
    from graywire.fabricsim.faults import LIVE_DEFAULT_FAULTS

    s = sub.add_parser("agent", help="the host agent: serve this host's sysfs/ethtool counters over HTTP")
    s.add_argument("--sysfs-root", type=Path, default=Path("/"), help="root holding sys/ (default /)")
    s.add_argument("--hostname", default=None, help="node name in port keys (default: this host's name)")
    s.add_argument("--listen", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    s.add_argument("--port", type=int, default=DEFAULT_AGENT_PORT, help=f"default {DEFAULT_AGENT_PORT}")
    s.add_argument(
        "--ethtool-dir",
        type=Path,
        default=None,
        help="read pre-captured <dir>/<if>/{statistics,fec,settings}",
    )
    s.add_argument("--ethtool", default="ethtool", help="ethtool binary (default: ethtool on PATH)")
    s.add_argument("--no-ethtool", action="store_true", help="read sysfs only")
    s.add_argument("--ethtool-timeout", type=float, default=5.0, help="seconds per ethtool call")
    s.add_argument(
        "--include-plain-netdevs",
        action="store_true",
        help="also report physical NICs without an RDMA device",
    )
    s.add_argument("--exclude", default=None, help="regex of device/interface names to skip")
    s.add_argument(
        "--perfquery",
        default=None,
        help="perfquery binary: read each IB port's 64-bit error counters with perfquery -x (needs umad)",
    )
    s.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="uvicorn log level"
    )
    s.add_argument(
        "--nvidia-smi",
        default="nvidia-smi",
        help="nvidia-smi for `topo -m` (run only if present); none: sysfs",
    )
    s.add_argument("--topo-file", type=Path, default=None, help="serve a saved `nvidia-smi topo -m` instead")
    s.add_argument(
        "--ncclras",
        default=None,
        metavar="HOST:PORT",
        help="serve this host's ranks from its NCCL RAS (NCCL_RAS_ADDR, e.g. 127.0.0.1:28028); default off",
    )
    s.add_argument(
        "--ncclras-timeout", type=float, default=5.0, help="seconds a RAS STATUS may take (default 5)"
    )
    s.add_argument("--ncclras-job", default="ncclras", help="job name of the RAS rows (default ncclras)")
    s.add_argument(
        "--ncclras-address",
        action="append",
        default=[],
        help="this host's NCCL bootstrap address as RAS prints it (repeatable; default: the host name's)",
    )
    s.set_defaults(func=cmd_agent)

    s = sub.add_parser(
        "check", help="check this node's GPU<->NIC data path once (exit 0 ok/skipped, 1 finding, 2 error)"
    )
    s.add_argument("--sysfs-root", type=Path, default=Path("/"), help="root holding sys/ (default /)")
    s.add_argument(
        "--nvidia-smi",
        default="nvidia-smi",
        help="nvidia-smi binary, run as `topo -m` if present; none: sysfs only",
    )
    s.add_argument("--topo-file", type=Path, default=None, help="read a saved `nvidia-smi topo -m` instead")
    s.add_argument("--timeout", type=float, default=10.0, help="seconds nvidia-smi may take (default 10)")
    s.add_argument(
        "--max-level",
        default="PXB",
        help="farthest nearest-NIC path that passes (default PXB, NCCL's GDR limit)",
    )
    s.add_argument("--nics", default=None, help="regex of the compute NICs' RDMA names (default: all)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser(
        "fakes", help="serve one simulated fabric as fake UFM, SNMP, host agents and NCCL files"
    )
    s.add_argument(
        "--out", default="graywire-fakes", help="directory for recordings, trees and graywire.yaml"
    )
    s.add_argument("--hosts", type=int, default=16, help="simulated hosts")
    s.add_argument(
        "--seed", type=int, default=0, help="random seed of the fabric, its traffic and the faults' targets"
    )
    s.add_argument("--faults", default=LIVE_DEFAULT_FAULTS, help="fault spec (docs/fabricsim.md), or 'none'")
    s.add_argument("--interval", default="10s", help="time between simulated polls, e.g. 10s")
    s.add_argument("--ufm-port", type=int, default=9701, help="TCP port of the fake UFM (REST and Telemetry)")
    s.add_argument(
        "--snmp-port",
        type=int,
        default=1161,
        help="UDP port of snmpsim (every switch, community = switch name)",
    )
    s.add_argument("--agent-port", type=int, default=9470, help="first agent's port; the next hosts count up")
    s.add_argument("--agent-hosts", type=int, default=4, help="hosts that get an agent")
    s.add_argument("--service-port", type=int, default=8000, help="port written into graywire.yaml")
    s.add_argument(
        "--discover",
        action="store_true",
        help="graywire.yaml says `inventory: discover`: the service builds its model from the fake UFM",
    )
    s.set_defaults(func=cmd_fakes)

    s = sub.add_parser("inventory", help="inventory files: discover one from a real fabric")
    isub = s.add_subparsers(dest="inventory_command", required=True)
    d = isub.add_parser(
        "discover",
        help="write an inventory from ibnetdiscover output, UFM REST or LLDP over SNMP "
        "(docs/inventory.md, Discovery)",
    )
    d.add_argument(
        "--ibnetdiscover", metavar="FILE", help="ibnetdiscover or ibnetdiscover -p output ('-': stdin)"
    )
    d.add_argument(
        "--ufm", metavar="URL", help="UFM base URL (https://ufm.example.com); reads ports and links"
    )
    d.add_argument(
        "--auth", choices=["basic", "token"], default="basic", help="UFM authentication (default basic)"
    )
    d.add_argument(
        "--username", help="UFM user (basic auth); password from --password-file or $GRAYWIRE_UFM_PASSWORD"
    )
    d.add_argument(
        "--password-file",
        type=Path,
        help="file holding the UFM password (basic auth); else $GRAYWIRE_UFM_PASSWORD",
    )
    d.add_argument("--token-file", type=Path, help="UFM access token file (or $GRAYWIRE_UFM_TOKEN)")
    d.add_argument("--ca-file", type=Path, help="CA (or self-signed certificate) to verify UFM's TLS with")
    d.add_argument(
        "--snmp",
        metavar="CONFIG",
        type=Path,
        help="walk LLDP-MIB on the switches of CONFIG's snmp sources (Ethernet/RoCE fabrics)",
    )
    d.add_argument("--insecure", action="store_true", help="do not verify UFM's TLS certificate")
    d.add_argument(
        "--purpose",
        action="append",
        default=[],
        metavar="GLOB=PURPOSE",
        help="host port labels matching GLOB are compute, storage or management (e.g. 'mlx5_[89]=storage')",
    )
    d.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="SELECTORS:SPEED[/WIDTH]",
        help="expected speed/width of matching ports, first rule wins (role=host,purpose=compute:800G/4)",
    )
    d.add_argument("--out", help="inventory file to write (default: stdout)")
    d.set_defaults(func=cmd_inventory_discover)

    from graywire.service.schedsync.cli import add_sync_commands

    add_sync_commands(sub)

    s = sub.add_parser("db", help="database maintenance")
    dsub = s.add_subparsers(dest="db_command", required=True)
    u = dsub.add_parser("upgrade", help="apply migrations up to head (keeps data)")
    u.add_argument(
        "--config",
        help="config file whose database_url to migrate (else $GRAYWIRE_DATABASE_URL or the SQLite default)",
    )
    u.add_argument("--database-url", help="database URL to migrate (beats --config and the environment)")
    u.set_defaults(func=cmd_db_upgrade)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from graywire.service import logs
    from graywire.service.memory_habits import keep_freed_memory

    logs.configure(args.verbose)
    keep_freed_memory()
    try:
        return int(args.func(args) or 0)
    except ValueError as e:
        print(f"graywire: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
