"""Examples of workloads written as a user writes them; not part of the installed package."""
