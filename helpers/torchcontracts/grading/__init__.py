"""The grader: ``torchcontracts grade``. It assumes a hostile student.

Modules, one job each:
  submission - read a notebook without trusting it; tell which lab it is
  plan       - rebuild the graded run from the course's own cells; load the lab's checks
  sandbox    - bubblewrap: what the learner's kernel can see and do
  hidden     - the grader-only modules (judges, references) a sandboxed kernel sees as placeholders
  grader_only - the stand-in bound over each of them there
  boot       - the one start-up script of a kernel, and the kernels' fork server (on forkloop)
  forkloop   - the one fork-server loop: preload once, then one JSON request and answer per line
  forkserver - the grader's side of the fork server; the scratch folder
  kernel     - run cells in a limited kernel with deadlines; take sealed steps
  protocol   - names, entry points, formats and codes shared by the grader and the kernel
  driver     - runs in the kernel: calls the learner's functions, seals the answers
  tripwire   - runs in the kernel in none mode: the audit hook that blocks opening solutions/
  freeze     - runs in the kernel's sealer: stops every process of the submission while it seals
  procs      - the processes of a submission: the one /proc reader, process-tree walker and limits block
  watch      - runs in the kernel: fingerprints of the code the checks rely on
  judge      - judges sealed answers in the grader's own process
  artefacts  - judges exported files (.pt2, .onnx, state_dict bytes) by running them in a separate sandbox
  artefact_runner - runs inside that sandbox: loads one artefact, runs it on the grader's inputs
  steps      - run a plan's steps in limited kernels; collect sealed answers and coded failures
  phases     - checks of several calls (``Check.then``): each later call in a new kernel of a new sandbox
  run        - grade one submission: the kernels, the judging, the scores
  reasons    - every reason as a code; the one table of human wording, rendered last
  api        - the public face for lab checks (a lab's judges import only this)
  results    - the options of a run and what it produces (results of submissions, tasks, checks)
  report     - terminal, JSON, Gradescope and gradebook output
  cli        - the command line

How a submission is graded, and why the learner cannot fake it:
1. Only the learner's solution cells (by stable id) come from the submission; every other cell
   comes from the course's ``labs/``; hidden checks come from ``solutions/`` only.
2. The kernel is forked from a fork server that imported torch and this package first. In bwrap
   mode (the default where bubblewrap works) that server runs in a sandbox: its own pid namespace
   that dies with the grader, no network, a read-only system without ``solutions/`` or ``.git``,
   and as root a uid of its own per kernel. ``RLIMIT_DATA`` caps memory (a CUDA wheel survives it).
   The package's judges and references (``hidden.GRADER_ONLY``) are not there either: each module is a
   stand-in whose names raise when called, and its compiled copies are gone, so a solution cannot import
   what computes the answer. (``hidden.NOT_YET_HIDDEN``: the judge modules the kernel still needs.)
3. The grader makes the inputs with a fresh seed. Each task's public checks run right after its
   cell; all hidden checks run in one step at the very end, so no hidden input is in the kernel
   while any public answer (whose error text a learner sees) is still to be produced. Inputs, job
   specs and a fresh token travel inside the driver cell's own code, never in a file.
4. **Sealing.** The grader judges only bytes that no learner code could touch after the learner's
   function returned. The driver serialises each answer as soon as the call returns, then forks a
   sealer: a process that holds a copy of those bytes as they were at that instant and has no
   other thread. The sealer clears trace and profile functions, stops every process of the
   submission (SIGSTOP: in bwrap mode every process of the kernel's uid, else the kernel's process
   tree), takes the tamper fingerprints, writes the step under the fresh token with ``O_EXCL`` and
   exits. The grader reads it only after checking that every process of the submission is
   stopped, then resumes them. A planted file, a rewrite after the seal or a second writer is
   refused: it cannot have the token in time, or it would have to run while stopped.
   Before forking, the driver refuses an active trace or profile function (tampering) and a
   thread the submission left running (the task fails: such a thread could race the answer).
   From each return of the learner's function to its next call or the seal, no learner code runs:
   gc is off (no gc callback) and every object the learner's code could touch stays alive until
   the seal (no finalizer). The driver keeps a digest of the records as it takes each one, in a
   local of its frame; the sealer refuses records that differ from it. The grader accepts each
   record once, from the step that asked for it, and one sealed file per token: a record added,
   replaced or planted by code that walks the driver's frames is tampering.
5. Tamper fingerprints cover every ``torchcontracts`` module loaded in the kernel, the torch modules
   the checks use (``torch.serialization`` too) and the builtins, and see code, not just ids
   (``__code__``, defaults, closure cells). Any change scores 0 for every task.
6. Answers are judged here, loaded with ``weights_only=True`` after caps on count, size and the
   zip's declared sizes. Hidden checks show a generic reason, never the learner's text; public
   ones show the learner's error scrubbed of paths. No variable of the grader's environment
   reaches a kernel.
7. A check of several calls (``Check.then``: a run that returns a checkpoint, then its resume) runs each
   later call in a new kernel forked by a fork server of its own, in a sandbox of its own (new ``/tmp``,
   ``/dev``, IPC namespace, uid and writable folder): only what the earlier answers carry reaches it.

What stays open, in-process, in both modes: code the learner runs *during* its own call (a thread
it started, a trace function) can shape that call's answer before the seal; a submission that
rewrites the kernel's own message loop (ipykernel) can run a forged driver. Both can only ever
produce an answer computed inside the learner's kernel on the grader's inputs; what `none` mode
adds to that is listed in ``sandbox.NONE_LEAVES_OPEN`` and the README.
"""
