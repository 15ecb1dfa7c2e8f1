package tidelog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One Spark task's writes: rows become record batches per partition (``BatchBuilder``), each sent to its
 * partition's leader as soon as it is full, up to ``max.in.flight`` per connection, and every one acknowledged
 * before the task commits (at least once, as Spark's Kafka sink). Keyed rows go where Kafka's default
 * partitioner puts them (murmur2), unkeyed rows stick to one partition per batch, a ``partition`` column wins.
 * With ``acks=all`` the writer is an idempotent producer (InitProducerId, sequence numbers): batches sent again
 * after a leader change or a lost connection are appended once.
 */
final class TopicWriter implements DataWriter<InternalRow> {
    /** What every task of one write needs (the columns' places and the producer's settings). */
    static final class WriteSettings implements Serializable {
        private static final long serialVersionUID = 1L;
        String[] bootstrap;
        String topic; // the topic option (a topic column wins where it is not null)
        int acks = -1;
        boolean idempotent = true;
        int batchSize = 1 << 20;
        long bufferMemory = 32L << 20;
        int codec;
        int maxInFlight = 5;
        int requestTimeoutMs = 30_000;
        long deliveryTimeoutMs = 120_000;
        int keyCol = -1, valueCol = -1, topicCol = -1, partitionCol = -1, headersCol = -1;
        boolean keyIsString, valueIsString;
        Security security;
    }

    static final class Commit implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final long records;

        Commit(long records) {
            this.records = records;
        }
    }

    private static final Set<Short> RETRIABLE = Set.of((short) 3, (short) 5, (short) 6, (short) 7, (short) 13,
            (short) 19, (short) 20, (short) 45, (short) 56, (short) 74, (short) 75);
    private static final Map<Short, String> NAMES = Map.ofEntries(
            Map.entry((short) 2, "CORRUPT_MESSAGE"), Map.entry((short) 10, "MESSAGE_TOO_LARGE"),
            Map.entry((short) 17, "INVALID_TOPIC_EXCEPTION"), Map.entry((short) 18, "RECORD_LIST_TOO_LARGE"),
            Map.entry((short) 29, "TOPIC_AUTHORIZATION_FAILED"), Map.entry((short) 31, "CLUSTER_AUTHORIZATION_FAILED"),
            Map.entry((short) 47, "INVALID_PRODUCER_EPOCH"), Map.entry((short) 59, "UNKNOWN_PRODUCER_ID"),
            Map.entry((short) 87, "INVALID_RECORD"), Map.entry((short) 3, "UNKNOWN_TOPIC_OR_PARTITION"),
            Map.entry((short) 6, "NOT_LEADER_OR_FOLLOWER"), Map.entry((short) 19, "NOT_ENOUGH_REPLICAS"),
            Map.entry((short) 45, "OUT_OF_ORDER_SEQUENCE_NUMBER"));

    private static final class Pending {
        final String topic;
        final int partition;
        final ByteBuffer bytes;
        final int sequence;
        final int count;
        String lastError; // why its last attempt failed: named in the error when it never succeeds

        Pending(String topic, int partition, ByteBuffer bytes, int sequence, int count) {
            this.topic = topic;
            this.partition = partition;
            this.bytes = bytes;
            this.sequence = sequence;
            this.count = count;
        }

        String tp() {
            return topic + "\u0000" + partition;
        }
    }

    private static final class Conn {
        final KafkaWire wire;
        final ArrayDeque<int[]> ids = new ArrayDeque<>();
        final ArrayDeque<Pending> inflight = new ArrayDeque<>();

        Conn(KafkaWire wire) {
            this.wire = wire;
        }
    }

    private static final class TopicInfo {
        String[] leaders;
        int sticky = -1;
    }

    private final WriteSettings s;
    private final Map<String, TopicInfo> topics = new HashMap<>();
    private final Map<String, Conn> conns = new HashMap<>();
    private final Map<String, BatchBuilder> open = new HashMap<>();
    private final Map<String, Integer> sequences = new HashMap<>();
    private final Map<String, Integer> acked = new HashMap<>(); // per partition: the last acknowledged sequence
    private final List<Pending> failed = new ArrayList<>();
    private long producerId = -1;
    private short producerEpoch = -1;
    private long records;
    private long openBytes; // memory held by open batches (their buffers' capacity)

    TopicWriter(WriteSettings settings) {
        this.s = settings;
    }

    // -- rows --------------------------------------------------------------------------------------------------

    @Override
    public void write(InternalRow row) throws IOException {
        // the topic option wins over a topic column, as in Spark's Kafka sink
        String topic = s.topic != null ? s.topic
                : s.topicCol >= 0 && !row.isNullAt(s.topicCol) ? row.getUTF8String(s.topicCol).toString() : null;
        if (topic == null) {
            throw new IOException("a row has no topic: give the topic option or a non-null topic column");
        }
        TopicInfo info = topic(topic);
        int n = info.leaders.length;
        byte[] keyArr = null;
        int keyOff = 0;
        int keyLen = -1;
        if (s.keyCol >= 0 && !row.isNullAt(s.keyCol)) {
            long[] at = new long[2];
            keyArr = bytesOf(row, s.keyCol, s.keyIsString, at);
            keyOff = (int) at[0];
            keyLen = (int) at[1];
        }
        byte[] valueArr = null;
        int valueOff = 0;
        int valueLen = -1;
        if (!row.isNullAt(s.valueCol)) {
            long[] at = new long[2];
            valueArr = bytesOf(row, s.valueCol, s.valueIsString, at);
            valueOff = (int) at[0];
            valueLen = (int) at[1];
        }
        byte[] headers = s.headersCol >= 0 && !row.isNullAt(s.headersCol) ? headersOf(row.getArray(s.headersCol)) : null;
        int partition;
        boolean sticky = false;
        if (s.partitionCol >= 0 && !row.isNullAt(s.partitionCol)) {
            partition = row.getInt(s.partitionCol);
            if (partition < 0 || partition >= n) {
                throw new IOException("partition " + partition + " is out of range for " + topic + " (" + n + " partitions)");
            }
        } else if (keyArr != null) {
            partition = (BatchBuilder.murmur2(keyArr, keyOff, keyLen) & 0x7fffffff) % n;
        } else {
            if (info.sticky < 0) {
                info.sticky = ThreadLocalRandom.current().nextInt(n);
            }
            partition = info.sticky;
            sticky = true;
        }
        String tp = topic + "\u0000" + partition;
        BatchBuilder b = open.get(tp);
        int estimate = BatchBuilder.estimate(keyLen, valueLen, headers == null ? 1 : headers.length);
        if (b != null && b.count > 0 && b.size() + estimate > s.batchSize) {
            open.remove(tp);
            ship(b);
            if (sticky) { // the sticky partition moves on when its batch is full, as Kafka's
                info.sticky = (info.sticky + 1) % n;
                partition = info.sticky;
                tp = topic + "\u0000" + partition;
            }
            b = open.get(tp);
        }
        if (b == null) {
            b = new BatchBuilder(topic, partition, Math.min(s.batchSize, Math.max(estimate * 16, 64 << 10)) + estimate);
            open.put(tp, b);
            openBytes += b.capacity();
        }
        int before = b.capacity();
        b.append(System.currentTimeMillis(), keyArr, keyOff, keyLen, valueArr, valueOff, valueLen, headers);
        openBytes += b.capacity() - before;
        records++;
        if (openBytes > s.bufferMemory) {
            bound();
        }
    }

    /** The bytes of a binary or string column: straight from an UnsafeRow's buffer when it has one (both are
     * stored there as offset and size), else a copy. */
    private static byte[] bytesOf(InternalRow row, int col, boolean string, long[] at) {
        if (row instanceof UnsafeRow u && u.getBaseObject() instanceof byte[] arr) {
            long offsetAndSize = u.getLong(col);
            at[0] = u.getBaseOffset() - Platform.BYTE_ARRAY_OFFSET + (offsetAndSize >> 32);
            at[1] = (int) offsetAndSize;
            return arr;
        }
        byte[] b = string ? row.getUTF8String(col).getBytes() : row.getBinary(col);
        at[0] = 0;
        at[1] = b.length;
        return b;
    }

    private static byte[] headersOf(ArrayData arr) {
        int n = arr.numElements();
        byte[][] keys = new byte[n][];
        byte[][] values = new byte[n][];
        for (int i = 0; i < n; i++) {
            InternalRow h = arr.getStruct(i, 2);
            UTF8String k = h.isNullAt(0) ? UTF8String.fromString("") : h.getUTF8String(0);
            keys[i] = k.getBytes();
            values[i] = h.isNullAt(1) ? null : h.getBinary(1);
        }
        return BatchBuilder.headers(keys, values);
    }

    // -- sending -----------------------------------------------------------------------------------------------

    private void ship(BatchBuilder b) throws IOException {
        openBytes -= b.capacity();
        if (!failed.isEmpty()) { // what failed goes first, in order: never more than max.in.flight per partition
            recover();
        }
        int base = -1;
        if (s.idempotent) {
            ensureProducerId();
            String tp = b.topic + "\u0000" + b.partition;
            base = sequences.getOrDefault(tp, 0);
            sequences.put(tp, base + b.count);
        }
        int count = b.count;
        send(new Pending(b.topic, b.partition, b.close(s.codec, producerId, producerEpoch, base), base, count));
    }

    /** Past ``buffer.memory`` held by open batches (many partitions), the largest goes now, as Kafka's
     * accumulator bounds what it holds (batches in flight, at most max.in.flight per connection, are not counted). */
    private void bound() throws IOException {
        while (openBytes > s.bufferMemory && !open.isEmpty()) {
            Map.Entry<String, BatchBuilder> largest = null;
            for (Map.Entry<String, BatchBuilder> e : open.entrySet()) {
                if (largest == null || e.getValue().size() > largest.getValue().size()) {
                    largest = e;
                }
            }
            open.remove(largest.getKey());
            ship(largest.getValue());
        }
    }

    private void fail(Pending p, String why) {
        p.lastError = why;
        failed.add(p);
    }

    /** Errors that no retry mends: the task fails at once, naming them. */
    static boolean fatal(IOException e) {
        String m = String.valueOf(e.getMessage());
        return m.startsWith("SASL_AUTHENTICATION_FAILED") || m.startsWith("UNSUPPORTED_SASL_MECHANISM")
                || m.startsWith("TLS to") || m.contains("AUTHORIZATION_FAILED");
    }

    private void send(Pending p) throws IOException {
        TopicInfo info = topic(p.topic);
        String leader = info.leaders[p.partition];
        if (leader == null) {
            fail(p, "no leader for " + p.topic + "-" + p.partition);
            return;
        }
        Conn c;
        try {
            c = conn(leader);
        } catch (IOException e) {
            if (fatal(e)) {
                throw e;
            }
            fail(p, "connecting to " + leader + ": " + e.getMessage());
            return;
        }
        while (s.acks != 0 && c.inflight.size() >= s.maxInFlight) {
            receiveOne(leader, c);
            if (conns.get(leader) != c) { // the connection broke while draining it
                fail(p, "the connection to " + leader + " broke");
                return;
            }
        }
        if (!failed.isEmpty()) { // an earlier batch failed while this one waited: it goes first (recover)
            fail(p, "waiting for an earlier batch");
            return;
        }
        try {
            int id = c.wire.sendProduce(p.topic, p.partition, p.bytes, s.acks, s.requestTimeoutMs);
            if (s.acks != 0) {
                c.ids.add(new int[] {id});
                c.inflight.add(p);
            }
        } catch (IOException e) {
            broken(leader, c, e);
            fail(p, "sending to " + leader + ": " + e.getMessage());
        }
    }

    private void receiveOne(String leader, Conn c) throws IOException {
        int id = c.ids.poll()[0];
        Pending p = c.inflight.poll();
        KafkaWire.Produced r;
        try {
            r = c.wire.receiveProduce(id);
        } catch (IOException e) {
            fail(p, "the answer from " + leader + ": " + e.getMessage());
            broken(leader, c, e);
            return;
        }
        if (r.error() == 0 || r.error() == 46) { // 46: DUPLICATE_SEQUENCE_NUMBER, already appended
            acked(p);
            return;
        }
        if (r.error() == 45 && p.sequence >= 0 && p.sequence + p.count - 1 <= acked.getOrDefault(p.tp(), -1)) {
            return; // OUT_OF_ORDER_SEQUENCE_NUMBER for a batch below one acknowledged after it: it was written
        }
        String why = NAMES.getOrDefault(r.error(), "Kafka error code " + r.error()) + " producing to " + p.topic + "-"
                + p.partition + (r.message() != null ? ": " + r.message() : "");
        if (RETRIABLE.contains(r.error())) {
            fail(p, why);
            return;
        }
        throw new IOException(why);
    }

    private void acked(Pending p) {
        if (p.sequence >= 0) {
            acked.merge(p.tp(), p.sequence + p.count - 1, Math::max);
        }
    }

    /** A connection that failed: everything in flight on it may or may not be written, so it goes again. */
    private void broken(String leader, Conn c, IOException why) {
        for (Pending q : c.inflight) {
            fail(q, "the connection to " + leader + " broke: " + why.getMessage());
        }
        c.inflight.clear();
        c.ids.clear();
        c.wire.close();
        conns.remove(leader, c);
    }

    private void drain() throws IOException {
        for (Map.Entry<String, Conn> e : new ArrayList<>(conns.entrySet())) {
            while (!e.getValue().inflight.isEmpty() && conns.get(e.getKey()) == e.getValue()) {
                receiveOne(e.getKey(), e.getValue());
            }
        }
    }

    /** Everything in flight answered, then what failed sent again in sequence order, until none fails. */
    private void recover() throws IOException {
        long deadline = System.currentTimeMillis() + s.deliveryTimeoutMs;
        int attempt = 0;
        drain();
        while (!failed.isEmpty()) {
            if (System.currentTimeMillis() > deadline) {
                Pending p = failed.get(0);
                throw new IOException("producing to " + p.topic + "-" + p.partition + " did not succeed within "
                        + s.deliveryTimeoutMs + " ms (kafka.delivery.timeout.ms); the last attempt: " + p.lastError);
            }
            try {
                Thread.sleep(Math.min(100L << Math.min(attempt++, 3), 1000L));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
            List<Pending> again = new ArrayList<>(failed);
            failed.clear();
            again.sort(Comparator.comparing((Pending p) -> p.topic).thenComparingInt(p -> p.partition)
                    .thenComparingInt(p -> p.sequence));
            for (String t : again.stream().map(p -> p.topic).distinct().toList()) {
                topics.remove(t); // ask where the leaders are now
            }
            for (Pending p : again) {
                send(p);
            }
            drain();
        }
    }

    // -- metadata and producer id ----------------------------------------------------------------------------

    private TopicInfo topic(String topic) throws IOException {
        TopicInfo info = topics.get(topic);
        if (info != null) {
            return info;
        }
        long deadline = System.currentTimeMillis() + Math.min(s.deliveryTimeoutMs, 30_000);
        IOException last = null;
        while (true) {
            for (String bootstrap : s.bootstrap) {
                try (KafkaWire w = new KafkaWire(bootstrap, s.requestTimeoutMs, s.security)) {
                    KafkaWire.Metadata md = w.metadata(List.of(topic), true);
                    Short err = md.topicErrors().get(topic);
                    Map<Integer, String> leaders = md.leaders().get(topic);
                    if (err != null && err == 29) {
                        throw new IOException("TOPIC_AUTHORIZATION_FAILED: not allowed to write to " + topic);
                    }
                    if (err == null && leaders != null && !leaders.isEmpty()) {
                        info = new TopicInfo();
                        info.leaders = new String[leaders.size()];
                        for (Map.Entry<Integer, String> e : leaders.entrySet()) {
                            info.leaders[e.getKey()] = e.getValue();
                        }
                        topics.put(topic, info);
                        return info;
                    }
                    last = new IOException("UNKNOWN_TOPIC_OR_PARTITION: topic " + topic + " does not exist"
                            + (err != null ? " (Kafka error code " + err + ")" : ""));
                } catch (IOException e) {
                    if (fatal(e)) {
                        throw e;
                    }
                    last = e;
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw last;
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
        }
    }

    private Conn conn(String address) throws IOException {
        Conn c = conns.get(address);
        if (c == null) {
            c = new Conn(new KafkaWire(address, s.requestTimeoutMs, s.security));
            conns.put(address, c);
        }
        return c;
    }

    private void ensureProducerId() throws IOException {
        if (producerId >= 0) {
            return;
        }
        long deadline = System.currentTimeMillis() + Math.min(s.deliveryTimeoutMs, 30_000);
        IOException last = null;
        while (System.currentTimeMillis() <= deadline) {
            for (String bootstrap : s.bootstrap) {
                try (KafkaWire w = new KafkaWire(bootstrap, s.requestTimeoutMs, s.security)) {
                    long[] r = w.initProducerId();
                    if (r[0] == 0) {
                        producerId = r[1];
                        producerEpoch = (short) r[2];
                        return;
                    }
                    last = new IOException("InitProducerId failed with Kafka error code " + r[0]);
                    if (!Set.of(7L, 14L, 15L, 16L, 19L, 51L).contains(r[0])) { // not a coordinator moving or loading
                        throw last;
                    }
                } catch (IOException e) {
                    if (fatal(e) || e == last) {
                        throw e;
                    }
                    last = e;
                }
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
        }
        throw last != null ? last : new IOException("InitProducerId did not succeed");
    }

    // -- the task's end ----------------------------------------------------------------------------------------

    @Override
    public WriterCommitMessage commit() throws IOException {
        for (BatchBuilder b : new ArrayList<>(open.values())) {
            ship(b);
        }
        open.clear();
        recover();
        return new Commit(records);
    }

    @Override
    public void abort() {
        close();
    }

    @Override
    public void close() {
        for (Conn c : conns.values()) {
            c.wire.close();
        }
        conns.clear();
    }
}
