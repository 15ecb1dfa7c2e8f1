package tidelog.spark;

import java.io.Serializable;

/** What every reader of one query needs, shipped to the executors with each task. */
final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;
    String[] bootstrap;
    int isolation; // 0 read_uncommitted, 1 read_committed (Kafka's isolation_level)
    boolean includeHeaders;
    boolean failOnDataLoss = true;
    int maxPartitionFetchBytes = 8 << 20;
    int maxWaitMs = 100;
    int requestTimeoutMs = 30_000;
    Security security;
}
