"""Reports: the sections of models/EVAL.md and models/eval_steps.svg, from the evaluation files in models/work/eval/."""
