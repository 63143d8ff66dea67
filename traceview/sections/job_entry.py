"""`JOB_SECTIONS`: the declared parts of a job entry (`jobs` in the document: a directory of 2+ rank files),
computed by job.py, straggler.py, straggler_fix.py, rank_changes.py and job_answer.py; docs/json-schema.md's JOB table is generated from them."""

from __future__ import annotations

from .section import Section

IDENTITY = Section(
    keys=("path", "ranks"),
    computes="the job's directory and its ranks",
    json_type="str, [int]",
    json_doc="the directory holding the rank files; the ranks found in it, in order",
    text="header",
    app_page="job",
)
CLASSIFICATION = Section(
    keys=("classification",),
    computes="each rank's classifier verdict, and its wait for the straggler",
    json_type="[object]",
    json_doc="one per rank: `rank`, `path`, `dominant`, `primary`, `shares` (`cpu_dominant` for a rank without GPU "
    "activity), and when the straggler rule raises a straggler (warning or error) for every other rank "
    "`straggler` (its rank) and `straggler_wait_pct` (that rank's exposed wait per step as % of the job's "
    "step period)",
    text="header",
    app_page="job",
)
NCCL = Section(
    keys=("nccl",),
    computes="collectives matched across ranks: wait per rank, pure transfer, the straggler and why",
    json_type="object",
    json_doc="`collectives` (matched), `method`, `source` (`kernel`: NCCL/RCCL GPU kernels; `gloo_annotation` / "
    "`c10d_op`: host-side collectives of a CPU/gloo job; `none`), `backend` (`distributedInfo.backend`, e.g. "
    "`nccl`, `gloo`), `steps` (analysed steps with matched collectives), `transfer_us`, `ranks` [{`rank`, "
    "`total_wait_us` (sum over collectives), `mean_wait_us` (per collective), `wait_per_step_us`, "
    "`median_wait_per_step_us`, `wait_by_step_us` {step: µs} (per step: union of the step's wait "
    "intervals), `exposed_wait_per_step_us`, `median_exposed_wait_per_step_us`, `exposed_wait_by_step_us` "
    "{step: µs} (the part of that union when the rank's GPU ran no other kernel, memcpy or memset: the time "
    "it actually lost to the late rank; equal to the wait for host-side collectives), `times_last`, "
    "`times_first`, `comm_us`, `sync_us`}], `straggler` {`rank`, `times_last`, `of`, `total_wait_us`, "
    "`reason`, `raised` (true when the straggler rule reports it at warning or error), `last_to_arrive` (replayed "
    "jobs: the rank most often last; the straggler is the rank whose own change saves the job most in the job "
    "replay, `replay.changes`, when that saving is above the step noise), `cause`} or null. "
    "`cause` (why it is late; `traceview/sections/straggler.py`) is null when it was never late at a "
    "matched collective, else {`rank`, `steps` (compared), `lateness_us_per_step` (its start minus the "
    "others' median start at the collective it was latest at, per step), `late_at` (collectives it arrived "
    "last and late at), `late_at_families`, `classes_excess_us_per_step` {class: µs} (its time in each "
    "classifier class before that collective minus the other ranks' median; ranks without GPU: `input`, "
    "`host_sync`, `host_busy`), `host_excess_us_per_step` {`input`, `host_sync`, `host_ops`, `python`, "
    "`untraced`: µs} (the host side of the same windows), `class` (the class with the largest excess, or "
    "null), `mechanism` (`host_code`, `extra_host_ops`, `slower_host_ops`, `input`, `host_sync`, "
    "`extra_kernels`, `slower_kernels`, `data_copy`, `other_idle`), `excess_us_per_step` (for a replayed GPU job: the job saving of its change; else the class's excess), "
    "`class_excess_us_per_step` (replayed jobs: the class's excess before the collectives), `change` (replayed "
    "jobs: {`source` (`median`: that class as fast as the other ranks' median; `finding`: a rule's fix), `name`, "
    "`rule`, `class`, `class_excess_us_per_step` (over the analysed steps)}), `mechanism_note` (when the mechanism "
    "says \"the same ops\" but the rank's own trace has findings: their rules), `evidence` "
    "(`ops` / `kernels` / `syncs` [{`name`, counts and µs per step on the straggler and the others}], "
    "`largest_gap` {`step`, `us`, `after_op`, `before_op`}, `python_frame`, `finding` {`rule`, `title`, `severity`} (a finding's fix as the change), `detail`), `text`, `severity` "
    "(the straggler finding's)}. From the job replay (GPU jobs, docs/multi-rank.md) the straggler also has `fix` "
    "(the change made to it: `rank R: <mechanism>`), `job_saving_us_per_step` (the job's step before minus after "
    "that change, replayed with every rank) and `noise_us_per_step` (the sample standard deviation of the job's "
    "traced step). `comm_bound` (null without GPU ranks): {`unexplained_per_step_us` (median over the ranks of "
    "their exposed communication minus their exposed wait for a late rank), `unexplained_pct` (% of the job's "
    "period), `ranks` [{`rank`, `exposed_comm_per_step_us`, `exposed_wait_per_step_us`, "
    "`unexplained_per_step_us`}], `link` {`gpu`, `link`, `peak_gbps` (per direction, docs/multi-rank.md's "
    "table)}, `bandwidth` {`by_collective` [{`collective`, `count`, `bytes`, `transfer_us`, `bus_gbps`}], "
    "`bytes`, `transfer_us`, `bus_gbps`} or null (no sizes recorded), `link_utilisation_pct`}",
    text="header",
    app_page="job",
)
FINDINGS = Section(
    keys=("findings",),
    computes="the job-level rules' findings",
    json_type="[FINDING]",
    json_doc="job-level findings, e.g. the straggler rule's naming the straggler rank; its evidence carries "
    "`exposed_wait_per_step_us` / `median_exposed_wait_per_step_us` (mean over the waiting ranks), on "
    "which its share and severity are based, or, when the job is replayed, on `job_saving_us_per_step` (with "
    "`noise_us_per_step`): a straggler is raised only when that saving is above the step-to-step noise (and above "
    "the profiler's cost when the straggler runs the same work as the others, only slower); otherwise `straggler` "
    "is null, with `last_rank`, `comm_bound` and a `note`: `Communication-bound: …` (warning at most) or `No "
    "straggler: …` (info)",
    text="findings",
    app_page="job",
)
STEP_PERIOD = Section(
    keys=("step_period",),
    computes="the job's step period and each rank's wait as a share of it",
    json_type="object",
    json_doc="`period_us` (the median of the ranks' periods), `method` (`gpu step ends`: median time between "
    "consecutive device-side step ends; `host step spans` for ranks without GPU; `step window` with one "
    "step), `ranks` [{`rank`, `period_us`, `wait_per_step_us`, `exposed_wait_per_step_us`, `wait_pct`, "
    "`exposed_wait_pct` (% of the job's period)}]",
    text="header",
    app_page="job",
)
REPLAY = Section(
    keys=("replay",),
    computes="the job replayed: every rank's graph joined at its matched collectives (analyses/job_replay.py)",
    json_type="object or null",
    json_doc="null when not replayed (no matched collective kernel or gloo range, or ranks without a GPU): "
    "{`fidelity` {`ranks` [{`rank`, `traced_us`, "
    "`replayed_us`, `mean_error_pct`, `max_error_pct`}], `max_error_pct`}, `job_step_us` (replayed as recorded: mean "
    "over ranks and steps), `unprofiled_job_step_us` (replayed with each rank's profiler cost taken off: what every "
    "job saving is priced against), `traced_job_step_us`, `noise_us`, `collectives`, `changes` [{`rank`, `source` (`median` / `finding`), "
    "`class`, `change`, `rule`, `own` (a class it spends more on than the others, or a finding most other ranks do "
    "not have: only those name a straggler), `excess_us_per_step`, `job_saving_us_per_step`}] (each candidate "
    "rank's changes replayed on the job, best first, up to 12), `doc`} (or {`note`} when the graph "
    "cannot be replayed)",
    text="header",
    app_page="job",
)
PROJECTION = Section(
    keys=("projection",),
    computes="the job's step replayed with the straggler's cause fixed, and with every rank's top fix",
    json_type="object or null",
    json_doc="null when not replayed (all unprofiled): {`job_step_us`, `straggler_fixed` {`rank`, `change`, `job_step_us`, "
    "`saving_us`}, `all_top_fixes` {`fixes` [{`rank`, `rule`}], `job_step_us`, `saving_us`} (each rank's top "
    "finding with a replayable fix, plus the straggler's cause; jobs of up to 16 ranks, else `note`)}",
    text="header",
    app_page="job",
)
WARNINGS = Section(
    keys=("warnings",),
    computes="what the job's analysis could not do (only present when there is something)",
    json_type="[str] (when present)",
    json_doc="e.g. rank files that name no rank (`distributedInfo` nor a `rank<N>` in the name): numbered in "
    "file-name order for the cross-rank analysis",
    text="header",
    app_page=None,
)

#: the keys of a job entry in document order (`warnings` only when there are some)
JOB_SECTIONS: tuple[Section, ...] = (
    IDENTITY, CLASSIFICATION, NCCL, FINDINGS, STEP_PERIOD, REPLAY, PROJECTION, WARNINGS
)
