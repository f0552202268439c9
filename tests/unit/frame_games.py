"""Games of random stacked frames for the frame replay's tests, and how a test fills a buffer with
them and checks what it samples against what went in."""

from __future__ import annotations

import numpy as np

STACK, SIDE = 4, 6


class Games:
    """``n`` games of random frames, stacked ``STACK`` deep along axis 0: an episode starts from a
    zero-padded stack, runs 1-40 steps and ends terminated or truncated; now and then the screen
    stands still for up to 30 steps (the stack repeats), so every way a stack can relate to the
    last one occurs."""

    def __init__(self, n: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = n
        self.obs = np.stack([self._start() for _ in range(n)])
        self.left = self.rng.integers(1, 40, n)
        self.still = np.zeros(n, np.int64)  # steps the screen stays as it is

    def _start(self) -> np.ndarray:
        stack = np.zeros((STACK, SIDE, SIDE), np.uint8)
        stack[-1] = self.rng.integers(1, 256, (SIDE, SIDE))
        return stack

    def step(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(obs, next_obs or final_obs, terminated, truncated, obs after autoreset)``."""
        obs = self.obs.copy()
        last = obs.copy()
        for g in range(self.n):
            if self.still[g] > 0 or self.rng.random() < 0.05:
                self.still[g] = self.still[g] - 1 if self.still[g] > 0 else self.rng.integers(1, 30)
                continue  # a still screen: the stack does not change
            last[g] = np.concatenate([obs[g, 1:], self.rng.integers(0, 256, (1, SIDE, SIDE), dtype=np.uint8)])
        self.left -= 1
        ended = self.left <= 0
        terminated = ended & (self.rng.random(self.n) < 0.5)
        truncated = ended & ~terminated
        after = last.copy()
        for g in np.flatnonzero(ended):
            after[g] = self._start()
            self.left[g] = self.rng.integers(1, 40)
        self.obs = after
        return obs, last, terminated.astype(np.float32), truncated.astype(np.float32), after


def fill(buffer, games: Games, steps: int, record: list) -> None:
    """Insert ``steps`` steps of ``games``; ``record`` gets every stored transition in order, the
    reward being its number in ``record`` (how a sampled transition is found again)."""
    for _ in range(steps):
        obs, last, terminated, truncated, _ = games.step()
        stored = np.ones(games.n, bool) if buffer.final_obs else (truncated == 0) | (terminated > 0)
        ids = np.full(games.n, -1.0, np.float32)
        ids[stored] = np.arange(len(record), len(record) + stored.sum())
        actions = np.arange(games.n) % 3
        for g in np.flatnonzero(stored):
            record.append((obs[g], last[g], actions[g], terminated[g]))
        buffer.insert(obs, actions, ids, last, terminated, truncated)


def assert_matches(batch, record: list, shape: tuple[int, ...] = (STACK, SIDE, SIDE)) -> None:
    """Each transition of ``batch`` is the one of ``record`` its reward numbers."""
    ids = batch.rewards.reshape(-1).long().tolist()
    obs = batch.obs.reshape((len(ids),) + shape).numpy()
    nxt = batch.next_obs.reshape((len(ids),) + shape).numpy()
    for row, i in enumerate(ids):
        want = record[i]
        np.testing.assert_array_equal(obs[row], want[0])
        np.testing.assert_array_equal(nxt[row], want[1])
        assert batch.actions.reshape(-1)[row] == want[2]
        assert batch.terminated.reshape(-1)[row] == want[3]
