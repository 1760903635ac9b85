"""The learning loop: which lessons were served for which task (the retrieval log), how the task went
afterwards (outcomes), which lessons help (usefulness against the agent's baseline), and which tasks found
nothing (knowledge gaps).

``models`` holds the rows; ``log`` records a retrieval; ``outcomes`` takes an agent's report and keeps
each served lesson's usefulness current; ``gaps`` groups the tasks nothing applied to; ``impact`` previews
what a pending lesson would change.
"""
