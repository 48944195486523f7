#!/usr/bin/python3
"""Decide and reward a few times against a running graphbandit server, and print what happens.

    PYTHONPATH=build/python /usr/bin/python3 client/python/example.py --target=127.0.0.1:50051

The simulated visitor likes article "b" in the morning (context 0) and "a" in the evening
(context 1); the server learns that from the rewards. With a server using TLS and tokens add
e.g. --tls_ca_file=ca.crt --token_file=bandit.token --admin_token_file=admin.token.
"""

import argparse
import random

from graphbandit import Client, GraphbanditError, bandit_pb2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50051")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tls_ca_file")
    parser.add_argument("--tls_cert_file")
    parser.add_argument("--tls_key_file")
    parser.add_argument("--tls_server_name")
    parser.add_argument("--token_file")
    parser.add_argument("--admin_token_file")
    args = parser.parse_args()

    articles = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.7, 0.7]}
    with Client(args.target, tls_ca_file=args.tls_ca_file, tls_cert_file=args.tls_cert_file,
                tls_key_file=args.tls_key_file, server_name=args.tls_server_name,
                token_file=args.token_file, admin_token_file=args.admin_token_file) as client:
        print("health:", client.health())
        # Two friends: what alice teaches the model helps bob too.
        client.add_edges([("example-alice", "example-bob", 1.0)])
        for i in range(args.rounds):
            user = random.choice(["example-alice", "example-bob"])
            evening = random.random() < 0.5
            decision = client.select(user, articles, context=[1.0 if evening else 0.0])
            top = decision.arms[0]
            liked = top.arm_id == ("a" if evening else "b")
            outcome = client.reward(decision.event_id, 1.0 if liked else 0.0)
            print(f"{i:3d} {user:14s} {'evening' if evening else 'morning'}: showed {top.arm_id} "
                  f"(mean {top.mean:+.2f}, sd {top.stddev:.2f}) -> reward {int(liked)}, "
                  f"{bandit_pb2.RewardOutcome.Name(outcome.outcome)}")
        model = client.describe_model()
        print(f"model {model.name}: {model.decisions} decisions, {model.rewards_learned} rewards "
              f"learned, {model.users} users, dictionary {model.dictionary_size}")
        try:
            client.select("example-alice", {})
        except GraphbanditError as e:
            print("a bad request raises GraphbanditError:", e.code.name, "-", e.message)


if __name__ == "__main__":
    main()
