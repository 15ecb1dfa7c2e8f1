package tidelog.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;
import java.util.zip.GZIPOutputStream;

/**
 * One record batch (format v2, Kafka's bytes) for one partition, built record by record: varints as Kafka
 * writes them, offsets and timestamps as deltas from the first record, one CRC-32C over the batch when it
 * is closed, the records section compressed then (gzip, snappy, lz4, zstd) when asked.
 */
final class BatchBuilder {
    static final int HEADER_SIZE = 61;
    static final int CODEC_NONE = 0, CODEC_GZIP = 1, CODEC_SNAPPY = 2, CODEC_LZ4 = 3, CODEC_ZSTD = 4;

    final String topic;
    final int partition;
    private byte[] buf;
    private int pos = HEADER_SIZE;
    int count;
    private long baseTimestamp = -1;
    private long maxTimestamp = -1;
    int sequence = -1; // the producer's sequence of the first record (idempotence), set when closed

    BatchBuilder(String topic, int partition, int capacity) {
        this.topic = topic;
        this.partition = partition;
        this.buf = new byte[Math.max(capacity, 1024)];
    }

    /** Bytes so far (the header included). */
    int size() {
        return pos;
    }

    /** Memory held (the buffer's capacity). */
    int capacity() {
        return buf.length;
    }

    /** An upper bound of what a record adds (Kafka's estimate: the varints at their widest). */
    static int estimate(int keyLength, int valueLength, int headersLength) {
        return 21 + Math.max(keyLength, 0) + Math.max(valueLength, 0) + headersLength + 5;
    }

    private void room(int n) {
        if (pos + n > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(buf.length * 2, pos + n));
        }
    }

    /**
     * Append one record. ``key`` and ``value`` are read from their arrays (null arrays: a null key or value);
     * ``headers`` is its already encoded header section (count included), or null for none.
     */
    void append(long timestamp, byte[] key, int keyOff, int keyLen, byte[] value, int valueOff, int valueLen,
                byte[] headers) {
        if (count == 0) {
            baseTimestamp = timestamp;
        }
        maxTimestamp = Math.max(maxTimestamp, timestamp);
        long tsDelta = timestamp - baseTimestamp;
        int kl = key == null ? -1 : keyLen;
        int vl = value == null ? -1 : valueLen;
        int body = 1 + sizeOfVarlong(tsDelta) + sizeOfVarint(count) + sizeOfVarint(kl) + Math.max(kl, 0)
                + sizeOfVarint(vl) + Math.max(vl, 0) + (headers == null ? 1 : headers.length);
        room(5 + body);
        writeVarint(body);
        buf[pos++] = 0; // attributes
        writeVarlong(tsDelta);
        writeVarint(count);
        writeVarint(kl);
        if (kl > 0) {
            System.arraycopy(key, keyOff, buf, pos, kl);
            pos += kl;
        }
        writeVarint(vl);
        if (vl > 0) {
            System.arraycopy(value, valueOff, buf, pos, vl);
            pos += vl;
        }
        if (headers == null) {
            buf[pos++] = 0;
        } else {
            System.arraycopy(headers, 0, buf, pos, headers.length);
            pos += headers.length;
        }
        count++;
    }

    /** The finished batch: header filled in, records compressed (``codec``), CRC-32C computed. */
    ByteBuffer close(int codec, long producerId, short producerEpoch, int baseSequence) throws IOException {
        byte[] out = buf;
        int end = pos;
        if (codec != CODEC_NONE) {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(Math.max(64, (pos - HEADER_SIZE) / 2));
            bytes.write(buf, 0, HEADER_SIZE);
            try (OutputStream z = switch (codec) {
                case CODEC_GZIP -> new GZIPOutputStream(bytes, 64 << 10);
                case CODEC_SNAPPY -> new org.xerial.snappy.SnappyOutputStream(bytes);
                case CODEC_LZ4 -> new net.jpountz.lz4.LZ4FrameOutputStream(bytes);
                case CODEC_ZSTD -> new com.github.luben.zstd.ZstdOutputStream(bytes);
                default -> throw new IOException("unknown compression codec " + codec);
            }) {
                z.write(buf, HEADER_SIZE, pos - HEADER_SIZE);
            }
            out = bytes.toByteArray();
            end = out.length;
        }
        ByteBuffer h = ByteBuffer.wrap(out);
        h.putLong(0, 0L); // base offset: the broker assigns it
        h.putInt(8, end - 12); // batch length
        h.putInt(12, -1); // partition leader epoch
        h.put(16, (byte) 2); // magic
        h.putShort(21, (short) codec); // attributes: compression, create time
        h.putInt(23, count - 1); // last offset delta
        h.putLong(27, baseTimestamp);
        h.putLong(35, maxTimestamp);
        h.putLong(43, producerId);
        h.putShort(51, producerEpoch);
        h.putInt(53, baseSequence);
        h.putInt(57, count);
        CRC32C crc = new CRC32C();
        crc.update(out, 21, end - 21);
        h.putInt(17, (int) crc.getValue());
        sequence = baseSequence;
        return ByteBuffer.wrap(out, 0, end);
    }

    // -- varints (zigzag, as Kafka's record fields) ---------------------------------------------------------------

    static int sizeOfVarint(int v) {
        int z = (v << 1) ^ (v >> 31);
        int n = 1;
        while ((z & 0xFFFFFF80) != 0) {
            n++;
            z >>>= 7;
        }
        return n;
    }

    static int sizeOfVarlong(long v) {
        long z = (v << 1) ^ (v >> 63);
        int n = 1;
        while ((z & 0xFFFFFFFFFFFFFF80L) != 0) {
            n++;
            z >>>= 7;
        }
        return n;
    }

    private void writeVarint(int v) {
        int z = (v << 1) ^ (v >> 31);
        while ((z & 0xFFFFFF80) != 0) {
            buf[pos++] = (byte) ((z & 0x7F) | 0x80);
            z >>>= 7;
        }
        buf[pos++] = (byte) z;
    }

    private void writeVarlong(long v) {
        long z = (v << 1) ^ (v >> 63);
        while ((z & 0xFFFFFFFFFFFFFF80L) != 0) {
            buf[pos++] = (byte) ((z & 0x7F) | 0x80);
            z >>>= 7;
        }
        buf[pos++] = (byte) z;
    }

    /** Encode a record's headers section: the count, then each key (UTF-8) and value (null: -1). */
    static byte[] headers(byte[][] keys, byte[][] values) {
        int n = keys.length;
        int size = sizeOfVarint(n);
        for (int i = 0; i < n; i++) {
            size += sizeOfVarint(keys[i].length) + keys[i].length;
            size += values[i] == null ? 1 : sizeOfVarint(values[i].length) + values[i].length;
        }
        BatchBuilder b = new BatchBuilder("", 0, size);
        b.pos = 0;
        b.writeVarint(n);
        for (int i = 0; i < n; i++) {
            b.writeVarint(keys[i].length);
            System.arraycopy(keys[i], 0, b.buf, b.pos, keys[i].length);
            b.pos += keys[i].length;
            if (values[i] == null) {
                b.writeVarint(-1);
            } else {
                b.writeVarint(values[i].length);
                System.arraycopy(values[i], 0, b.buf, b.pos, values[i].length);
                b.pos += values[i].length;
            }
        }
        return Arrays.copyOf(b.buf, b.pos);
    }

    /** Kafka's murmur2 (``Utils.murmur2``): the default partitioner's hash of a key. */
    @SuppressWarnings("fallthrough")
    static int murmur2(byte[] data, int off, int length) {
        final int seed = 0x9747b28c;
        final int m = 0x5bd1e995;
        final int r = 24;
        int h = seed ^ length;
        int length4 = length / 4;
        for (int i = 0; i < length4; i++) {
            final int i4 = off + i * 4;
            int k = (data[i4] & 0xff) + ((data[i4 + 1] & 0xff) << 8) + ((data[i4 + 2] & 0xff) << 16)
                    + ((data[i4 + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> r;
            k *= m;
            h *= m;
            h ^= k;
        }
        int rest = off + (length & ~3);
        switch (length % 4) {
            case 3:
                h ^= (data[rest + 2] & 0xff) << 16;
                // fall through
            case 2:
                h ^= (data[rest + 1] & 0xff) << 8;
                // fall through
            case 1:
                h ^= data[rest] & 0xff;
                h *= m;
                break;
            default:
                break;
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }
}
