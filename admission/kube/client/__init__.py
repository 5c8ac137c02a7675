"""Talking to the API server: REST calls, the client-side rate limit, kubeconfig files, and what an unreachable server looks like."""
