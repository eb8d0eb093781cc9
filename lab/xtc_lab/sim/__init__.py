"""The simulated plant (VRs behind a shared Dom0) and the product's closed loop on it: the paper's experiments
(``xtc simulate``), the quick demo and the controllers' benchmark run here without root or a hypervisor."""
