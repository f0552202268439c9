"""Built-in algorithms, each written only against msrl's public API.

They never import ray, fragments, policies or cluster: an algorithm does not
know how it is distributed.
"""
