"""Property tests of retention by restore point (hypothesis): random run histories of an application (complete
and partial runs, a second policy's runs, backups outside any run) and random rule sets, forgotten on a
repository in memory. Whatever the history and the rules: runs stay whole, the newest complete run and every
complete run a rule keeps stay, a partial run never displaces a complete one, another policy's backups are
untouched, and the whole-application restore of "latest" picks the same complete run before and after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from movers.repo.manifest import APP_TAG, POLICY_TAG, RUN_TAG, Manifest, MapRef, SnapshotIdentity, VolumeIdentity
from movers.repo.repository import Repository
from movers.repo.retention import forget_each
from movers.repo.retention_rules import Policy
from movers.repo.runretention import RunPoint, select_runs
from movers.repo.selection import select
from movers.repo.store import MemoryStore

PVCS = ("data", "logs", "wal")
START = datetime(2024, 12, 20, tzinfo=UTC)  # across a year end: ISO weeks and months roll over
NOW = START + timedelta(days=60)

run_st = st.tuples(
    st.integers(0, 40 * 24 * 4),  # quarter hours after START
    st.sets(st.sampled_from(PVCS), max_size=2),  # the members whose mover failed (partial run unless empty)
    st.sampled_from(("weekly", "nightly")),  # the policy that made it
)
rules_st = st.fixed_dictionaries(
    {name: st.integers(0, 4) for name in ("keep_last", "keep_daily", "keep_weekly", "keep_monthly")}
).filter(lambda r: any(r.values()))


def _manifest(volume: str, created: datetime, n: int, tags: dict[str, str], run_pvcs) -> Manifest:
    ns, _, pvc = volume.partition("/")
    return Manifest(
        created.strftime("%Y%m%dT%H%M%S%fZ") + f"-{n:06x}",
        VolumeIdentity(volume, namespace=ns, pvc=pvc),
        0,
        SnapshotIdentity(),
        None,
        "full",
        created.isoformat(),
        MapRef(1 << 26, 256, [], 0),
        tags=tags,
        run_pvcs=run_pvcs,
    )


def _history(runs, loose: int) -> tuple[Repository, dict[str, dict]]:
    """A repository with the runs (and ``loose`` backups of shop/data outside any run); run id -> its facts."""
    repo = Repository.init(MemoryStore())
    facts: dict[str, dict] = {}
    n = 0
    for i, (quarter, failed, policy) in enumerate(sorted(runs, key=lambda r: r[0])):
        run = f"run{i:03d}"
        base = START + timedelta(minutes=15 * quarter)
        keys = []
        done = [p for p in PVCS if p not in failed]
        for j, pvc in enumerate(done):
            n += 1
            tags = {RUN_TAG: run, APP_TAG: "shop", POLICY_TAG: policy}
            m = _manifest(f"shop/{pvc}", base + timedelta(seconds=j), n, tags, list(PVCS))
            repo.store.put(m.key, m.encode())
            keys.append(m.key)
        facts[run] = {"time": base + timedelta(seconds=len(done) - 1), "complete": not failed, "policy": policy}
        facts[run]["keys"] = keys
    for k in range(loose):
        n += 1
        m = _manifest("shop/data", START + timedelta(hours=7 * k, minutes=1), n, {}, None)
        repo.store.put(m.key, m.encode())
    return repo, facts


def _buckets(t: datetime) -> dict[str, str]:
    year, week, _ = t.isocalendar()
    return {
        "keep_daily": t.strftime("%Y-%m-%d"),
        "keep_weekly": f"{year}-W{week:02d}",
        "keep_monthly": t.strftime("%Y-%m"),
    }


def _rule_keeps(facts: dict[str, dict], rules: dict[str, int]) -> set[str]:
    """An independent statement of what the rules keep of one policy's runs: of its COMPLETE runs, the newest, the
    ``keep_last`` newest, and the newest of each of the newest ``keep_<period>`` periods that have one."""
    complete = sorted((f["time"], run) for run, f in facts.items() if f["complete"])[::-1]
    if not complete:
        return set()
    kept = {complete[0][1]} | {run for _t, run in complete[: rules["keep_last"]]}
    for rule in ("keep_daily", "keep_weekly", "keep_monthly"):
        newest_of: dict[str, str] = {}
        for t, run in complete:
            newest_of.setdefault(_buckets(t)[rule], run)
        kept |= set(list(newest_of.values())[: rules[rule]])
    return kept


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(run_st, min_size=1, max_size=14),
    st.integers(0, 3),
    rules_st,
    st.booleans(),
    st.sampled_from((None, "shop/data")),
)
# two runs that overlap: the partial one ends first but holds shop/data's newest backup (CI found this one)
@example(
    [(0, set(), "nightly"), (0, {"logs"}, "nightly")],
    0,
    dict(keep_last=0, keep_daily=0, keep_weekly=0, keep_monthly=1),
    False,
    None,
)
def test_forget_never_loses_a_complete_run_a_rule_keeps(runs, loose, rules, one_policy, volume):
    repo, facts = _history(runs, loose)
    ns_latest = _latest_complete(repo)
    before = set(repo.store.list())
    policy = "nightly" if one_policy else None
    report, _missing = forget_each(repo, None if volume is None else [volume], policy=policy, now=NOW, **rules)
    after = set(repo.store.list())
    assert before - after == set(report.deleted)

    def judged(keys) -> set[str]:
        """What this forget may delete of ``keys``: with ``volume``, only that volume's backups."""
        return {k for k in keys if volume is None or k.startswith(repo.volume_prefix(volume))}

    assert set(report.deleted) <= judged(before)
    newest_keys: dict[str, dict[str, list[str]]] = {"weekly": {}, "nightly": {}}  # policy -> volume -> run keys
    for f in facts.values():
        for k in f["keys"]:
            newest_keys[f["policy"]].setdefault(_volume_of(k), []).append(k)
    for made_by in ("weekly", "nightly"):
        mine = {run: f for run, f in facts.items() if f["policy"] == made_by}
        if policy is not None and made_by != policy:  # another policy's backups: not even judged
            assert all(set(f["keys"]) <= after for f in mine.values())
            continue
        for run in _rule_keeps(mine, rules):  # every complete run a rule keeps, the newest complete among them
            assert set(mine[run]["keys"]) <= after, (run, made_by, rules)
        newest_complete = max((f["time"] for f in mine.values() if f["complete"]), default=None)
        for run, f in mine.items():
            present, mine_here = set(f["keys"]) & after, judged(f["keys"])
            assert present in (set(f["keys"]) - mine_here, set(f["keys"])), f"run {run} split: {present} of {f['keys']}"
            if f["complete"] or newest_complete is None or not mine_here:
                continue
            # a partial run stays exactly while it is newer than the newest complete run, or while it holds a
            # volume's newest backup of this policy (runs that overlap in time: it ended before the complete one)
            holds_newest = any(k == max(newest_keys[made_by].get(_volume_of(k), [k])) for k in f["keys"])
            assert (mine_here <= present) == (f["time"] > newest_complete or holds_newest), (run, f, newest_complete)
        kept_complete = {run for run, f in mine.items() if f["complete"] and set(f["keys"]) <= after}
        complete_kept_by_rules = _rule_keeps(mine, rules)
        holders = {
            run for run, f in mine.items() if any(k == max(newest_keys[made_by][_volume_of(k)]) for k in f["keys"])
        }
        # no partial run took a complete run's place: what is kept of the complete runs is what the rules say
        # (and the runs that hold a volume's newest backup)
        assert kept_complete - holders == complete_kept_by_rules - holders, (kept_complete, complete_kept_by_rules)
        assert complete_kept_by_rules <= kept_complete
    # the newest backup of every volume stays (the base of its next incremental)
    for volume in ("shop/data", "shop/logs", "shop/wal"):
        keys = sorted(k for k in before if k.startswith(repo.volume_prefix(volume)))
        if keys:
            assert keys[-1] in after, volume
    # the whole-application restore of "latest" still finds the complete run it found before
    assert _latest_complete(repo) == ns_latest


def _volume_of(key: str) -> str:
    """The volume id of a manifest key (``backups/<quoted volume>/<backup id>``)."""
    return key.split("/")[1]


def _latest_complete(repo) -> str | None:
    try:
        return select(repo, "shop", None, "latest").run
    except Exception:  # noqa: BLE001  (no complete run, or no backup: compared as None)
        return None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2000), st.booleans(), st.sets(st.sampled_from(PVCS), min_size=1)),
        min_size=1,
        max_size=12,
        unique_by=lambda p: p[0],
    ),
    rules_st,
)
def test_select_runs_keeps_the_newest_complete_and_each_volumes_newest(points, rules):
    """The pure rule, with members coming and going: the newest complete run is kept (or, with none complete, the
    newest run), and every volume's newest run is kept."""
    runs = [
        RunPoint(f"r{t:05d}", START + timedelta(hours=t), complete, {v: f"{t:08d}" for v in vols})
        for t, complete, vols in points
    ]
    verdicts = select_runs(runs, Policy(**rules), now=NOW)
    kept = {v.point.run for v in verdicts if v.kept}
    complete = sorted((p for p in runs if p.complete), key=lambda p: p.created)
    assert (complete or sorted(runs, key=lambda p: p.created))[-1].run in kept
    for pvc in PVCS:
        having = sorted((p for p in runs if pvc in p.volumes), key=lambda p: p.created)
        if having:
            assert having[-1].run in kept, pvc
    assert [v.point.run for v in verdicts] == [p.run for p in sorted(runs, key=lambda p: p.created, reverse=True)]
    for v in verdicts:
        assert v.kept or v.why_forgotten
