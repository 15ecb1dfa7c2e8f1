package tidelog.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one offset range of one partition from its leader's Kafka listener and hands out Spark rows
 * (the Kafka source's schema) cut straight from the fetched record batches (format v2): every batch's
 * CRC-32C is checked, compressed batches are inflated (gzip, snappy, lz4, zstd), control batches are
 * skipped, and under read_committed the records of aborted transactions are left out as Kafka's consumer
 * does (the fetch's aborted-transaction list, then the ABORT markers). A record that does not parse is an
 * error naming the topic, partition and offset; nothing is skipped silently.
 */
final class RangeReader implements PartitionReader<InternalRow> {
    private static final int HEADER_SIZE = 61;
    private static final int ATTR_COMPRESSION = 0x07, ATTR_LOG_APPEND_TIME = 0x08, ATTR_TRANSACTIONAL = 0x10,
            ATTR_CONTROL = 0x20;
    private static final int MAX_RETRIES = 20;

    private final OffsetRange range;
    private final Settings settings;
    private final UTF8String topicUtf8;
    private final UnsafeRowWriter writer;
    private KafkaWire wire;
    private long nextOffset;

    // the batch being read
    private byte[] a;
    private int pos;
    private int end;
    private int left;
    private long baseOffset;
    private long baseTimestamp;
    private long maxTimestamp;
    private int timestampType;
    private boolean logAppendTime;
    private long batchLast;

    // read_committed
    private final PriorityQueue<long[]> aborted = new PriorityQueue<>((x, y) -> Long.compare(x[1], y[1]));
    private final Set<Long> abortedProducers = new HashSet<>();

    // the fetched response being walked
    private ByteBuffer fetched;
    private long emptySince; // when fetches began to bring nothing readable (0: they do)
    private int pendingId; // a fetch sent ahead (0: none), from pendingOffset
    private long pendingOffset;
    private int retries;
    private InternalRow row;

    RangeReader(OffsetRange range, Settings settings) {
        this.range = range;
        this.settings = settings;
        this.topicUtf8 = UTF8String.fromString(range.topic);
        this.writer = new UnsafeRowWriter(7, 1 << 12);
        this.nextOffset = range.from;
    }

    @Override
    public boolean next() throws IOException {
        while (true) {
            if (left > 0) {
                if (readRecord()) {
                    return true;
                }
                if (nextOffset >= range.until) {
                    return false;
                }
                continue;
            }
            if (fetched != null && fetched.hasRemaining() && openBatch()) {
                continue;
            }
            if (nextOffset >= range.until) {
                return false;
            }
            fetchMore();
        }
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() {
        pendingId = 0;
        if (wire != null) {
            wire.close();
            wire = null;
        }
    }

    private String where(long offset) {
        return range.topic + "-" + range.partition + " at offset " + offset;
    }

    // -- fetching ----------------------------------------------------------------------------------------------

    private void fetchMore() throws IOException {
        KafkaWire.FetchedPartition fp;
        try {
            if (wire == null) {
                wire = new KafkaWire(leader(), settings.requestTimeoutMs, settings.security);
            }
            if (pendingId != 0 && pendingOffset != nextOffset) { // sent ahead from where reading did not end
                wire.receiveFetch(pendingId, range.topic, range.partition);
                pendingId = 0;
            }
            int id = pendingId != 0 ? pendingId : wire.sendFetch(range.topic, range.partition, nextOffset,
                    settings.maxPartitionFetchBytes, settings.maxWaitMs, settings.isolation);
            pendingId = 0;
            fp = wire.receiveFetch(id, range.topic, range.partition);
        } catch (IOException e) {
            retry("fetch failed: " + e.getMessage(), e);
            return;
        }
        switch (fp.error) {
            case 0:
                break;
            case 1: { // OFFSET_OUT_OF_RANGE: the start is gone (retention, deleted records) or past the end
                long[] earliest = wire.listOffsets(range.topic, List.of(range.partition), -2, settings.isolation)
                        .getOrDefault(range.partition, new long[] {-1, -1});
                if (earliest[0] != 0 || earliest[1] < 0) { // the leadership moved meanwhile: ask again
                    retry("ListOffsets after OFFSET_OUT_OF_RANGE answered error " + earliest[0], null);
                    return;
                }
                long logStart = earliest[1];
                if (logStart > nextOffset && settings.failOnDataLoss) {
                    throw new IOException("OFFSET_OUT_OF_RANGE: " + where(nextOffset) + " is no longer in the log "
                            + "(it starts at " + logStart + "); some data may have been lost. "
                            + "Set failOnDataLoss=false to read on from the log start instead");
                }
                if (logStart > nextOffset) {
                    nextOffset = logStart;
                    return;
                }
                throw new IOException("OFFSET_OUT_OF_RANGE: " + where(nextOffset) + " (the log starts at "
                        + logStart + "; the planned end is " + range.until + ")");
            }
            case 3: case 5: case 6: case 7: case 13: case 15: case 19: case 56: case 74: case 75:
                // UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
                // NETWORK_EXCEPTION, COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR,
                // FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: the leadership moves; ask again
                retry("error " + fp.error + " from " + wire.address, null);
                return;
            case 2:
                throw new IOException("CORRUPT_MESSAGE: the broker found a corrupt batch in " + where(nextOffset));
            case 29:
                throw new IOException("TOPIC_AUTHORIZATION_FAILED: not allowed to read " + range.topic);
            default:
                throw new IOException("fetch of " + where(nextOffset) + " failed with Kafka error code " + fp.error);
        }
        retries = 0;
        if (settings.isolation == 1) {
            aborted.addAll(fp.aborted);
        }
        if (!fp.records.hasRemaining() || endOfWholeBatches(fp.records) < 0) {
            // Nothing readable yet. A new leader's high watermark can lag behind the old one's for a moment
            // (until its followers fetch again), so an end before the planned one is waited out, up to
            // kafka.request.timeout.ms without progress, before it is called a truncated or recreated log.
            long now = System.currentTimeMillis();
            if (emptySince == 0) {
                emptySince = now;
            } else if (now - emptySince > settings.requestTimeoutMs) {
                long end = settings.isolation == 1 ? fp.lastStableOffset : fp.highWatermark;
                throw new IOException(fp.records.hasRemaining()
                        ? "no whole record batch at " + where(nextOffset) + " for " + settings.requestTimeoutMs
                            + " ms in fetches of " + settings.maxPartitionFetchBytes + " bytes"
                        : "no records at " + where(nextOffset) + " for " + settings.requestTimeoutMs + " ms: the log"
                            + " ends at " + end + ", before the planned end " + range.until + " (truncated, the"
                            + " topic recreated, or its leader not caught up)");
            }
            try {
                Thread.sleep(20); // the fetch's max wait already paced it, unless the broker answered at once
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted", e);
            }
            return;
        }
        emptySince = 0;
        fetched = fp.records;
        // Ask for what follows while this response is decoded: the broker reads the next records meanwhile.
        long after = endOfWholeBatches(fetched);
        if (after > nextOffset && after < range.until) {
            pendingId = wire.sendFetch(range.topic, range.partition, after, settings.maxPartitionFetchBytes,
                    settings.maxWaitMs, settings.isolation);
            pendingOffset = after;
        }
    }

    /** The offset after the last whole batch of a fetched response (-1 when it holds none). */
    private static long endOfWholeBatches(ByteBuffer f) {
        long after = -1;
        int p = f.position();
        while (f.limit() - p >= HEADER_SIZE) {
            int length = f.getInt(p + 8);
            if (length < HEADER_SIZE - 12 || f.limit() - p < 12 + length) {
                break;
            }
            after = f.getLong(p) + f.getInt(p + 23) + 1;
            p += 12 + length;
        }
        return after;
    }

    private String leader() throws IOException {
        IOException last = null;
        for (String bootstrap : settings.bootstrap) {
            try (KafkaWire w = new KafkaWire(bootstrap, settings.requestTimeoutMs, settings.security)) {
                KafkaWire.Metadata md = w.metadata(List.of(range.topic), false);
                String leader = md.leaders().getOrDefault(range.topic, java.util.Map.of()).get(range.partition);
                if (leader != null) {
                    return leader;
                }
                last = new IOException("no leader for " + range.topic + "-" + range.partition);
            } catch (IOException e) {
                last = e;
            }
        }
        throw last != null ? last : new IOException("no bootstrap server");
    }

    private void retry(String why, IOException cause) throws IOException {
        close();
        if (++retries > MAX_RETRIES) {
            throw new IOException("reading " + where(nextOffset) + " failed " + MAX_RETRIES + " times: " + why, cause);
        }
        try {
            Thread.sleep(Math.min(100L * retries, 1000L));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
    }

    // -- batches -----------------------------------------------------------------------------------------------

    /** Opens the next batch of ``fetched`` holding records to return; false when the response is used up. */
    private boolean openBatch() throws IOException {
        ByteBuffer f = fetched;
        while (f.remaining() >= 12) {
            int start = f.position();
            long base = f.getLong(start);
            int length = f.getInt(start + 8);
            if (length < HEADER_SIZE - 12) {
                throw new IOException("CORRUPT_MESSAGE: a batch of " + length + " bytes in " + where(base));
            }
            if (f.remaining() < 12 + length) {
                fetched = null; // a partial batch at the end of the response: fetch it again
                return false;
            }
            f.position(start + 12 + length);
            byte magic = f.get(start + 16);
            if (magic != 2) {
                throw new IOException("record batch format v" + magic + " in " + where(base)
                        + ": only v2 is read (as Kafka 4.0)");
            }
            byte[] arr = f.array();
            int abs = f.arrayOffset() + start;
            long crc = f.getInt(start + 17) & 0xFFFFFFFFL;
            CRC32C c = new CRC32C();
            c.update(arr, abs + 21, length - 9);
            if (c.getValue() != crc) {
                throw new IOException("CORRUPT_MESSAGE: CRC mismatch in the batch of " + where(base));
            }
            int attributes = f.getShort(start + 21);
            int lastDelta = f.getInt(start + 23);
            long last = base + lastDelta;
            long producerId = f.getLong(start + 43);
            int count = f.getInt(start + 57);
            if (last < nextOffset) {
                continue; // before the range (a fetch returns the whole batch holding its offset)
            }
            nextOffset = Math.max(nextOffset, base); // compacted gaps
            boolean control = (attributes & ATTR_CONTROL) != 0;
            if (settings.isolation == 1 && producerId >= 0) {
                while (!aborted.isEmpty() && aborted.peek()[1] <= last) {
                    abortedProducers.add(aborted.poll()[0]);
                }
                if (control) {
                    if (isAbortMarker(arr, abs + HEADER_SIZE, abs + 12 + length, base)) {
                        abortedProducers.remove(producerId);
                    }
                } else if ((attributes & ATTR_TRANSACTIONAL) != 0 && abortedProducers.contains(producerId)) {
                    nextOffset = last + 1;
                    continue;
                }
            }
            if (control || count <= 0) {
                nextOffset = last + 1;
                continue;
            }
            baseOffset = base;
            baseTimestamp = f.getLong(start + 27);
            maxTimestamp = f.getLong(start + 35);
            logAppendTime = (attributes & ATTR_LOG_APPEND_TIME) != 0;
            timestampType = logAppendTime ? 1 : 0;
            int codec = attributes & ATTR_COMPRESSION;
            if (codec == 0) {
                a = arr;
                pos = abs + HEADER_SIZE;
                end = abs + 12 + length;
            } else {
                a = inflate(codec, arr, abs + HEADER_SIZE, length + 12 - HEADER_SIZE, base);
                pos = 0;
                end = a.length;
            }
            left = count;
            batchLast = last;
            return true;
        }
        fetched = null;
        return false;
    }

    private static boolean isAbortMarker(byte[] arr, int p, int end, long base) throws IOException {
        // one control record: length, attributes, timestamp delta, offset delta, key (version int16, type int16)
        int[] at = {p};
        varint(arr, at); // length
        at[0]++; // attributes
        varlong(arr, at);
        varint(arr, at);
        int keyLength = varint(arr, at);
        if (keyLength < 4 || at[0] + 4 > end) {
            throw new IOException("control batch at offset " + base + " has no marker key");
        }
        int type = ((arr[at[0] + 2] & 0xFF) << 8) | (arr[at[0] + 3] & 0xFF);
        return type == 0;
    }

    private static byte[] inflate(int codec, byte[] arr, int off, int len, long base) throws IOException {
        InputStream raw = new ByteArrayInputStream(arr, off, len);
        try (InputStream in = switch (codec) {
            case 1 -> new GZIPInputStream(raw, 64 << 10);
            case 2 -> new org.xerial.snappy.SnappyInputStream(raw);
            case 3 -> new net.jpountz.lz4.LZ4FrameInputStream(raw);
            case 4 -> new com.github.luben.zstd.ZstdInputStream(raw);
            default -> throw new IOException("unknown compression codec " + codec + " in the batch at offset " + base);
        }) {
            return in.readAllBytes();
        } catch (IOException e) {
            throw new IOException("CORRUPT_MESSAGE: the batch at offset " + base + " does not decompress: "
                    + e.getMessage(), e);
        }
    }

    // -- records -----------------------------------------------------------------------------------------------

    /** Decodes the next record of the open batch; true when it is in the range (``row`` is set). */
    private boolean readRecord() throws IOException {
        byte[] b = a;
        int[] at = {pos};
        long offset = -1;
        try {
            int length = varint(b, at);
            int recordStart = at[0];
            int recordEnd = recordStart + length;
            if (length < 6 || recordEnd > end) {
                throw new IOException("record length " + length + " runs past its batch");
            }
            at[0]++; // attributes
            long tsDelta = varlong(b, at);
            int offsetDelta = varint(b, at);
            offset = baseOffset + offsetDelta;
            int keyLength = varint(b, at);
            int keyAt = at[0];
            if (keyLength > 0) {
                at[0] += keyLength;
            }
            int valueLength = varint(b, at);
            int valueAt = at[0];
            if (valueLength > 0) {
                at[0] += valueLength;
            }
            int headerCount = varint(b, at);
            List<InternalRow> headers = null;
            if (settings.includeHeaders) {
                headers = new ArrayList<>(Math.max(headerCount, 0));
            }
            for (int h = 0; h < headerCount; h++) {
                int hk = varint(b, at);
                if (hk < 0 || at[0] + hk > recordEnd) {
                    throw new IOException("bad header key length " + hk);
                }
                int hkAt = at[0];
                at[0] += hk;
                int hv = varint(b, at);
                int hvAt = at[0];
                if (hv > 0) {
                    at[0] += hv;
                }
                if (headers != null) {
                    byte[] hvBytes = hv < 0 ? null : java.util.Arrays.copyOfRange(b, hvAt, hvAt + hv);
                    headers.add(new GenericInternalRow(new Object[] {
                        UTF8String.fromBytes(b, hkAt, hk), hvBytes}));
                }
            }
            if (at[0] != recordEnd || keyLength < -1 || valueLength < -1 || headerCount < 0) {
                throw new IOException("the record's fields do not end where its length says");
            }
            pos = recordEnd;
            left--;
            if (left == 0) {
                nextOffset = batchLast + 1;
                if (pos != end) {
                    throw new IOException("bytes after the last record of the batch");
                }
            } else {
                nextOffset = offset + 1;
            }
            if (offset < range.from || offset >= range.until) {
                if (offset >= range.until) {
                    left = 0;
                    nextOffset = range.until;
                }
                return false;
            }
            long ts = logAppendTime ? maxTimestamp : baseTimestamp + tsDelta;
            if (headers == null) {
                UnsafeRowWriter w = writer;
                w.reset();
                w.zeroOutNullBytes();
                if (keyLength < 0) {
                    w.setNullAt(0);
                } else {
                    w.write(0, b, keyAt, keyLength);
                }
                if (valueLength < 0) {
                    w.setNullAt(1);
                } else {
                    w.write(1, b, valueAt, valueLength);
                }
                w.write(2, topicUtf8);
                w.write(3, range.partition);
                w.write(4, offset);
                w.write(5, ts * 1000L);
                w.write(6, timestampType);
                row = w.getRow();
            } else {
                row = new GenericInternalRow(new Object[] {
                    keyLength < 0 ? null : java.util.Arrays.copyOfRange(b, keyAt, keyAt + keyLength),
                    valueLength < 0 ? null : java.util.Arrays.copyOfRange(b, valueAt, valueAt + valueLength),
                    topicUtf8, range.partition, offset, ts * 1000L, timestampType,
                    new GenericArrayData(headers.toArray())});
            }
            return true;
        } catch (ArrayIndexOutOfBoundsException | IOException e) {
            throw new IOException("CORRUPT_MESSAGE: undecodable record in the batch of "
                    + where(offset >= 0 ? offset : baseOffset) + ": " + e.getMessage(), e);
        }
    }

    private static int varint(byte[] b, int[] at) throws IOException {
        int p = at[0];
        int raw = 0;
        int shift = 0;
        while (true) {
            byte x = b[p++];
            raw |= (x & 0x7F) << shift;
            if (x >= 0) {
                break;
            }
            shift += 7;
            if (shift > 28) {
                throw new IOException("varint longer than 5 bytes");
            }
        }
        at[0] = p;
        return (raw >>> 1) ^ -(raw & 1);
    }

    private static long varlong(byte[] b, int[] at) throws IOException {
        int p = at[0];
        long raw = 0;
        int shift = 0;
        while (true) {
            byte x = b[p++];
            raw |= (long) (x & 0x7F) << shift;
            if (x >= 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw new IOException("varlong longer than 10 bytes");
            }
        }
        at[0] = p;
        return (raw >>> 1) ^ -(raw & 1);
    }
}
