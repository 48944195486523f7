"""Message and stub modules of the graphbandit.v1 API.

bandit_pb2, bandit_pb2_grpc, config_pb2 and config_pb2_grpc are generated into this package at
build time from proto/graphbandit/v1/*.proto (see client/python/CMakeLists.txt); they are not
kept in the source tree.
"""
