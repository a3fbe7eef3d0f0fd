#!/usr/bin/env python3
"""The last step of a real-node job: one table of every proof and its outcome, and the job fails if any proof did not
pass. The proofs run whatever happened before them (`if: !cancelled()`), so one failure hides nothing; this step
turns their outcomes into the job's.

  gate.py --results DIR PROOF_ID...

STEPS (the environment) is the workflow's `toJSON(steps)`; each PROOF_ID is a proof step's `id`, and DIR/PROOF_ID.summary
the one line its script wrote (check-node.sh / e2e-external.sh `--label PROOF_ID`). The table goes to stdout and to
$GITHUB_STEP_SUMMARY when set. A proof that did not succeed — failed, skipped, cancelled, or absent from STEPS — fails
the gate.
"""
import json
import os
import sys


def main(argv):
    if len(argv) < 4 or argv[1] != "--results":
        sys.exit(__doc__)
    results, proofs = argv[2], argv[3:]
    steps = json.loads(os.environ.get("STEPS") or "{}")
    rows, bad = [], []
    for proof in proofs:
        outcome = steps.get(proof, {}).get("outcome") or "did not run"
        try:
            with open(os.path.join(results, proof + ".summary"), encoding="utf-8") as f:
                said = f.read().strip()
        except OSError:
            said = "(no summary written)"
        said = said.replace("|", "\\|").replace("\n", " ")
        mark = "✅" if outcome == "success" else "❌"
        rows.append(f"| {mark} `{proof}` | {outcome} | {said} |")
        if outcome != "success":
            bad.append(f"{proof} ({outcome})")
    unknown = sorted(set(steps) - set(proofs))
    lines = [
        f"### {os.environ.get('WINCSI_LEG', 'real-node')}: {len(proofs) - len(bad)} of {len(proofs)} proofs passed",
        "",
        "| Proof | Outcome | What it showed |",
        "| --- | --- | --- |",
        *rows,
        "",
    ]
    if unknown:
        lines.append(f"Other steps with an id (not proofs): {', '.join(unknown)}")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    if bad:
        sys.exit(f"gate: {len(bad)} proof(s) did not pass: {', '.join(bad)}")


if __name__ == "__main__":
    main(sys.argv)
