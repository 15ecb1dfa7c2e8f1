"""Client quotas shared by the broker, the quota service and the admin API: entities, Kafka's precedence,
windowed rates and the throttle formula. Pure logic: no gRPC, etcd, asyncio or files; time is passed in."""
