"""Known-wrong: forgets NumPy's generator, which the data noise draws from."""
from solutions.lab12_fault_tolerance import random, torch


def resume_state(sampler, state=None):
    if state is None:
        out = {"python": random.getstate(), "torch": torch.get_rng_state(), "sampler": sampler.state_dict()}
        if torch.cuda.is_available():
            out["cuda"] = torch.cuda.get_rng_state_all()
        return out
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    sampler.load_state_dict(state["sampler"])
