"""Typed tools the policy can call, a registry, and their execution in a sandbox (``docs/tools.md``)."""
