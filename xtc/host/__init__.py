"""Host backends: the one interface XTC uses to see and cap a host's VRs, and its implementations."""
