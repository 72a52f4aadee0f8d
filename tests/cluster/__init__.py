"""The cluster suite: agui-relay on a local three-node KRaft cluster (``make test-cluster``)."""
