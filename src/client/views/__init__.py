"""Typed views of ctld's replies: what the commands read, and the one place that names
a reply's fields.

A command wraps each object of a reply once (``Job(raw)``, ``Node(raw)``...) and reads
typed properties (``job.time_limit_s``, ``job.spec.gpus_per_node``); each property
reads its field from the reply's TypedDict (``corral/wire/json_types.py``), so mypy
checks every key here, and a field renamed in the proto fails the type check instead
of printing a blank column. Properties read on access (a listing of 10,000 jobs pays
for the columns it prints, no more) and give proto3's default for an absent field.

A module per reply family (job: Job, its allocations, usage and events; spec; step;
node: Node, Resources, Partition; accounting: reservations, shares, usage records,
outcomes), imported one by one: a command pays for the views it reads, no more.
"""
