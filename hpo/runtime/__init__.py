"""The process runtime: workers, how each runs its trials (in-process, or in forkserver children),
the forkserver and its warm-up, placement on devices, the ticket budget and heartbeats, deadlines."""
