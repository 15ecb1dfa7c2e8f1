package tidelog.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** The offsets [from, until) of one topic partition: one Spark task reads them. */
final class OffsetRange implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String topic;
    final int partition;
    final long from;
    final long until;

    OffsetRange(String topic, int partition, long from, long until) {
        this.topic = topic;
        this.partition = partition;
        this.from = from;
        this.until = until;
    }

    @Override
    public String toString() {
        return topic + "-" + partition + "[" + from + ", " + until + ")";
    }
}
