"""The bench's in-environment half: the workloads, their timing and the one-shot samples,
the roofline, dispatch and collectives measurements (stdlib and torch only)."""
