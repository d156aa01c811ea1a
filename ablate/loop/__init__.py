"""The cell: config -> environment -> policy -> [rollout -> score -> update] -> evaluation,
with its outputs (atomic, resumable), tracking and the asynchronous rollout producer.
It knows the domain packages only through their protocols and registries."""
