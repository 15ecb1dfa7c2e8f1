package tidelog.spark;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One plaintext connection to a Tidelog broker's Kafka listener, speaking the requests a batch read or write
 * needs in non-flexible versions the listener serves: Metadata v4, ListOffsets v2, Fetch v5, InitProducerId v0
 * and Produce v8 (request header v1, response header v0). Not thread safe: one per reader or writer.
 */
final class KafkaWire implements Closeable {
    static final short METADATA = 3, LIST_OFFSETS = 2, FETCH = 1, PRODUCE = 0, INIT_PRODUCER_ID = 22;
    static final int MAX_RESPONSE = 512 << 20;
    /** What to check when what answers is not a Kafka listener speaking the expected protocol. */
    static final String NOT_KAFKA = ": is it a broker's Kafka listener (cluster.json's kafka_bootstrap, not its gRPC "
            + "brokers), and does kafka.security.protocol match it (a secure cluster's listener takes SASL_SSL or SSL)?";

    private final Socket socket;
    private final DataOutputStream out;
    private final DataInputStream in;
    private int correlation;
    final String address;

    /** A connection to ``address`` (host:port), in TLS and authenticated as ``security`` says (null: plaintext). */
    KafkaWire(String address, int timeoutMs, Security security) throws IOException {
        this.address = address;
        int colon = address.lastIndexOf(':');
        if (colon <= 0) {
            throw new IllegalArgumentException("a Kafka listener address is host:port, got '" + address + "'");
        }
        String host = address.substring(0, colon);
        int port = Integer.parseInt(address.substring(colon + 1));
        Socket raw = new Socket();
        raw.setTcpNoDelay(true);
        raw.setReceiveBufferSize(4 << 20);
        raw.connect(new InetSocketAddress(host, port), timeoutMs);
        raw.setSoTimeout(timeoutMs);
        try {
            socket = security != null && security.tls() ? security.wrap(raw, host, port) : raw;
        } catch (IOException e) {
            raw.close();
            throw new IOException("TLS to " + address + " failed: " + e.getMessage() + " (is it a secure cluster's "
                    + "Kafka listener, and kafka.ssl.ca.location its CA?)", e);
        }
        out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 64 << 10));
        in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 1 << 20));
        if (security != null && security.mechanism != null) {
            try {
                security.authenticate(this);
            } catch (IOException e) {
                close();
                throw e;
            } catch (RuntimeException e) { // a malformed answer: a bad base64 value, a short buffer
                close();
                throw new IOException("SASL_AUTHENTICATION_FAILED: a malformed SCRAM exchange with " + address + ": "
                        + e, e);
            }
        }
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // nothing to do: the reader is done with this connection
        }
    }

    /** Send one request and return its response body (after the correlation id). */
    ByteBuffer call(short apiKey, short version, ByteBuffer body) throws IOException {
        return receive(send(apiKey, version, body), apiKey);
    }

    /** Send one request (responses come back in order: Kafka answers a connection's requests in turn). */
    int send(short apiKey, short version, ByteBuffer body) throws IOException {
        int id = ++correlation;
        byte[] client = "tidelog-spark-jvm".getBytes(StandardCharsets.UTF_8);
        int size = 2 + 2 + 4 + 2 + client.length + body.remaining();
        out.writeInt(size);
        out.writeShort(apiKey);
        out.writeShort(version);
        out.writeInt(id);
        out.writeShort(client.length);
        out.write(client);
        out.write(body.array(), body.arrayOffset() + body.position(), body.remaining());
        out.flush();
        return id;
    }

    /** The response body of request ``id`` (the next one to come back). */
    ByteBuffer receive(int id, short apiKey) throws IOException {
        int length;
        try {
            length = in.readInt();
        } catch (EOFException e) {
            throw new IOException("the broker at " + address + " closed the connection (api key " + apiKey + ")"
                    + NOT_KAFKA, e);
        }
        if (length < 4 || length > MAX_RESPONSE) {
            throw new IOException("response of " + length + " bytes from " + address + " is not a Kafka response"
                    + NOT_KAFKA);
        }
        byte[] data = new byte[length];
        try {
            in.readFully(data);
        } catch (EOFException e) {
            throw new IOException("the broker at " + address + " closed the connection in the middle of a response "
                    + "(api key " + apiKey + ")" + NOT_KAFKA, e);
        }
        ByteBuffer resp = ByteBuffer.wrap(data);
        int got = resp.getInt();
        if (got != id) {
            throw new IOException("correlation id " + got + " from " + address + ", expected " + id);
        }
        return resp;
    }

    // -- encoding helpers --------------------------------------------------------------------------------------

    static final class Body {
        private ByteBuffer buf = ByteBuffer.allocate(256);

        private void room(int n) {
            if (buf.remaining() < n) {
                ByteBuffer bigger = ByteBuffer.allocate(Math.max(buf.capacity() * 2, buf.position() + n));
                buf.flip();
                bigger.put(buf);
                buf = bigger;
            }
        }

        Body() { }
        Body i8(int v) { room(1); buf.put((byte) v); return this; }
        Body bytes(ByteBuffer b) { room(4 + b.remaining()); buf.putInt(b.remaining()); buf.put(b.duplicate()); return this; }
        Body i16(int v) { room(2); buf.putShort((short) v); return this; }
        Body i32(int v) { room(4); buf.putInt(v); return this; }
        Body i64(long v) { room(8); buf.putLong(v); return this; }

        Body str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            room(2 + b.length);
            buf.putShort((short) b.length);
            buf.put(b);
            return this;
        }

        ByteBuffer done() {
            buf.flip();
            return buf;
        }
    }

    static String str(ByteBuffer b) {
        short n = b.getShort();
        if (n < 0) {
            return null;
        }
        String s = new String(b.array(), b.arrayOffset() + b.position(), n, StandardCharsets.UTF_8);
        b.position(b.position() + n);
        return s;
    }

    // -- Metadata v4 -------------------------------------------------------------------------------------------

    /** Partition leaders of ``topics`` (all when null): topic -> partition -> leader's host:port (null while it has none). */
    record Metadata(Map<String, Map<Integer, String>> leaders, Map<String, Short> topicErrors) { }

    /** Metadata v4: ``autoCreate`` false for readers (a read never creates a topic), true for writers (as
     * Kafka's producer, with the brokers' ``auto.create.topics.enable``). */
    Metadata metadata(List<String> topics, boolean autoCreate) throws IOException {
        Body body = new Body().i32(topics == null ? -1 : topics.size()); // null: every topic
        for (String t : topics == null ? List.<String>of() : topics) {
            body.str(t);
        }
        body.i8(autoCreate ? 1 : 0);
        ByteBuffer r = call(METADATA, (short) 4, body.done());
        r.getInt(); // throttle
        Map<Integer, String> brokers = new HashMap<>();
        int nb = r.getInt();
        for (int i = 0; i < nb; i++) {
            int id = r.getInt();
            String host = str(r);
            int port = r.getInt();
            str(r); // rack
            brokers.put(id, host + ":" + port);
        }
        str(r); // cluster id
        r.getInt(); // controller id
        Map<String, Map<Integer, String>> leaders = new HashMap<>();
        Map<String, Short> errors = new HashMap<>();
        int nt = r.getInt();
        for (int i = 0; i < nt; i++) {
            short err = r.getShort();
            String name = str(r);
            r.get(); // is_internal
            Map<Integer, String> parts = new HashMap<>();
            int np = r.getInt();
            for (int j = 0; j < np; j++) {
                r.getShort(); // partition error
                int partition = r.getInt();
                int leader = r.getInt();
                skipInt32Array(r); // replicas
                skipInt32Array(r); // isr
                parts.put(partition, leader >= 0 ? brokers.get(leader) : null);
            }
            if (err != 0) {
                errors.put(name, err);
            }
            leaders.put(name, parts);
        }
        return new Metadata(leaders, errors);
    }

    private static void skipInt32Array(ByteBuffer r) {
        int n = r.getInt();
        if (n > 0) {
            r.position(r.position() + 4 * n);
        }
    }

    // -- ListOffsets v2 ----------------------------------------------------------------------------------------

    /** ``timestamp`` -2 (earliest), -1 (latest: the high watermark, or the LSO under read_committed). */
    Map<Integer, long[]> listOffsets(String topic, List<Integer> partitions, long timestamp, int isolation)
            throws IOException {
        Body body = new Body().i32(-1).i8(isolation).i32(1).str(topic).i32(partitions.size());
        for (int p : partitions) {
            body.i32(p).i64(timestamp);
        }
        ByteBuffer r = call(LIST_OFFSETS, (short) 2, body.done());
        r.getInt(); // throttle
        Map<Integer, long[]> out = new HashMap<>();
        int nt = r.getInt();
        for (int i = 0; i < nt; i++) {
            str(r);
            int np = r.getInt();
            for (int j = 0; j < np; j++) {
                int partition = r.getInt();
                short err = r.getShort();
                r.getLong(); // timestamp
                long offset = r.getLong();
                out.put(partition, new long[] {err, offset});
            }
        }
        return out;
    }

    // -- Fetch v5 ----------------------------------------------------------------------------------------------

    /** One partition's part of a fetch response; ``records`` is a slice of the response (no copy). */
    static final class FetchedPartition {
        short error;
        long highWatermark;
        long lastStableOffset;
        long logStartOffset;
        List<long[]> aborted = new ArrayList<>(); // {producer id, first offset}
        ByteBuffer records;
    }

    /** Send a fetch of one partition from ``offset``; ``receiveFetch`` takes its answer. */
    int sendFetch(String topic, int partition, long offset, int maxBytes, int maxWaitMs, int isolation)
            throws IOException {
        ByteBuffer body = new Body().i32(-1).i32(maxWaitMs).i32(1).i32(maxBytes).i8(isolation)
                .i32(1).str(topic).i32(1).i32(partition).i64(offset).i64(-1).i32(maxBytes).done();
        return send(FETCH, (short) 5, body);
    }

    FetchedPartition receiveFetch(int id, String topic, int partition) throws IOException {
        ByteBuffer r = receive(id, FETCH);
        r.getInt(); // throttle
        FetchedPartition found = null;
        int nt = r.getInt();
        for (int i = 0; i < nt; i++) {
            String name = str(r);
            int np = r.getInt();
            for (int j = 0; j < np; j++) {
                FetchedPartition fp = new FetchedPartition();
                int p = r.getInt();
                fp.error = r.getShort();
                fp.highWatermark = r.getLong();
                fp.lastStableOffset = r.getLong();
                fp.logStartOffset = r.getLong();
                int na = r.getInt();
                for (int k = 0; k < na; k++) {
                    fp.aborted.add(new long[] {r.getLong(), r.getLong()});
                }
                int size = r.getInt();
                if (size > 0) {
                    ByteBuffer slice = r.slice(r.position(), size);
                    r.position(r.position() + size);
                    fp.records = slice;
                } else {
                    fp.records = ByteBuffer.allocate(0);
                }
                if (topic.equals(name) && p == partition) {
                    found = fp;
                }
            }
        }
        if (found == null) {
            throw new IOException("the fetch response from " + address + " does not name " + topic + "-" + partition);
        }
        return found;
    }

    // -- InitProducerId v0 (idempotence: no transactional id) --------------------------------------------------

    /** {error code, producer id, producer epoch}. */
    long[] initProducerId() throws IOException {
        ByteBuffer r = call(INIT_PRODUCER_ID, (short) 0, new Body().i16(-1).i32(60_000).done());
        r.getInt(); // throttle
        short err = r.getShort();
        long pid = r.getLong();
        short epoch = r.getShort();
        return new long[] {err, pid, epoch};
    }

    // -- Produce v8 --------------------------------------------------------------------------------------------

    /** Send one batch for one partition (acks 0 gets no answer: then nothing is to be received). */
    int sendProduce(String topic, int partition, ByteBuffer batch, int acks, int timeoutMs) throws IOException {
        ByteBuffer body = new Body().i16(-1).i16(acks).i32(timeoutMs).i32(1).str(topic).i32(1).i32(partition)
                .bytes(batch).done();
        return send(PRODUCE, (short) 8, body);
    }

    /** {error code, base offset} of the one partition of a produce answer, and its error message if any. */
    record Produced(short error, long baseOffset, String message) { }

    Produced receiveProduce(int id) throws IOException {
        ByteBuffer r = receive(id, PRODUCE);
        Produced out = null;
        int nt = r.getInt();
        for (int i = 0; i < nt; i++) {
            str(r);
            int np = r.getInt();
            for (int j = 0; j < np; j++) {
                r.getInt(); // index
                short err = r.getShort();
                long base = r.getLong();
                r.getLong(); // log append time
                r.getLong(); // log start offset
                int ne = r.getInt();
                StringBuilder why = new StringBuilder();
                for (int k = 0; k < ne; k++) {
                    r.getInt();
                    String m = str(r);
                    if (m != null) {
                        why.append(m).append("; ");
                    }
                }
                String message = str(r);
                if (message != null) {
                    why.append(message);
                }
                out = new Produced(err, base, why.length() > 0 ? why.toString() : null);
            }
        }
        if (out == null) {
            throw new IOException("the produce response from " + address + " names no partition");
        }
        return out;
    }
}
