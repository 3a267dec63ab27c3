"""Primitives for files on a shared filesystem (Lustre, GPFS, NFS) that several nodes read and write.

| module    | does                                                                                |
| --------- | ----------------------------------------------------------------------------------- |
| `fileops` | atomic publish (temporary name, fsync, rename), private modes and the share group    |
| `locks`   | locks on small shared mutable files, of a configurable kind (link, soft, flock, ...) |
| `handoff` | doorbells and `Waiter`, the one way a role waits for another's hand-off              |

Nothing here knows the run directory's layout or any role; everything above builds on these.
"""
