package tidelog.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * ``format("tidelog-jvm")``: reads (batch and micro-batch streams) and writes of Tidelog topics in the JVM,
 * through the brokers' Kafka listener. Reads have the Kafka source's schema and its options
 * (``kafka.bootstrap.servers``, ``subscribe`` / ``subscribePattern`` / ``assign``, ``startingOffsets`` /
 * ``endingOffsets``, ``includeHeaders``, ``kafka.isolation.level``, ``failOnDataLoss``, ``minPartitions``,
 * ``maxOffsetsPerTrigger``); writes (batch and streaming) take the Kafka sink's columns (``key``, ``value``,
 * ``topic``, ``partition``, ``headers``) and are at least once (``TopicWriter``). The rows never pass through
 * Python, which is what bounds the ``tidelog`` Python data source and sink. Secure clusters take the ``tidelog``
 * source's security options (``Security``: TLS, SCRAM); timestamps and exactly-once writes stay with
 * ``format("tidelog")``.
 */
public final class TidelogJvmSource implements TableProvider, DataSourceRegister {
    static final String NAME = "tidelog-jvm";

    @Override
    public String shortName() {
        return NAME;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schema(Boolean.parseBoolean(options.getOrDefault("includeHeaders", "false")));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new TopicTable(schema);
    }

    /** An option's value as a positive int, or a refusal naming the option. */
    static int positiveOption(String v, String name) {
        try {
            int n = Integer.parseInt(v.strip());
            if (n > 0) {
                return n;
            }
        } catch (NumberFormatException ignored) {
            // refused below
        }
        throw new IllegalArgumentException("option " + name + " must be a positive integer, got '" + v + "'");
    }

    static StructType schema(boolean includeHeaders) {
        StructType s = new StructType()
                .add("key", DataTypes.BinaryType)
                .add("value", DataTypes.BinaryType)
                .add("topic", DataTypes.StringType)
                .add("partition", DataTypes.IntegerType)
                .add("offset", DataTypes.LongType)
                .add("timestamp", DataTypes.TimestampType)
                .add("timestampType", DataTypes.IntegerType);
        if (includeHeaders) {
            StructType header = new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType);
            s = s.add("headers", DataTypes.createArrayType(header));
        }
        return s;
    }

    static final class TopicTable implements Table, SupportsRead, SupportsWrite {
        private final StructType schema;

        TopicTable(StructType schema) {
            this.schema = schema;
        }

        @Override
        public String name() {
            return NAME;
        }

        @Override
        @SuppressWarnings("deprecation") // columns() needs Spark 3.4+; schema() is on every Spark 3 and 4
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
                    TableCapability.STREAMING_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            TopicWriter.WriteSettings ws = WriteOptions.parse(info.options(), info.schema());
            return new WriteBuilder() {
                @Override
                public Write build() {
                    return new Write() {
                        @Override
                        public String description() {
                            return NAME + "[topic=" + ws.topic + "]";
                        }

                        @Override
                        public BatchWrite toBatch() {
                            return new TopicWrite(ws);
                        }

                        @Override
                        public StreamingWrite toStreaming() {
                            return new TopicWrite(ws);
                        }
                    };
                }
            };
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            Options opts = Options.parse(options);
            return () -> new TopicScan(schema, opts);
        }
    }

    /** A write's options and columns, checked on the driver before any task runs. */
    static final class WriteOptions {
        static TopicWriter.WriteSettings parse(CaseInsensitiveStringMap o, StructType schema) {
            TopicWriter.WriteSettings ws = new TopicWriter.WriteSettings();
            String servers = o.get("kafka.bootstrap.servers");
            if (servers == null || servers.isBlank()) {
                throw new IllegalArgumentException("option kafka.bootstrap.servers is required: the brokers' Kafka "
                        + "listener (host:port,...; cluster.json's kafka_bootstrap)");
            }
            ws.security = Security.parse(o);
            for (String k : List.of("transactional.id.prefix", "transactional.id", "kafka.transactional.id")) {
                if (o.containsKey(k)) {
                    throw new IllegalArgumentException("option " + k + " is not supported by format(\"" + NAME
                            + "\") (at least once, as Spark's Kafka sink): format(\"tidelog\") writes exactly once");
                }
            }
            ws.bootstrap = Arrays.stream(servers.split(",")).map(String::strip).filter(x -> !x.isEmpty())
                    .toArray(String[]::new);
            String topic = o.get("topic");
            ws.topic = topic == null || topic.isBlank() ? null : topic.strip();
            String acks = producerOption(o, "acks", "all").strip().toLowerCase(Locale.ROOT);
            ws.acks = switch (acks) {
                case "all", "-1" -> -1;
                case "1" -> 1;
                case "0" -> 0;
                default -> throw new IllegalArgumentException("option kafka.acks must be all, -1, 1 or 0, got '" + acks + "'");
            };
            String idem = producerOption(o, "enable.idempotence", "true");
            if (!idem.equalsIgnoreCase("true") && !idem.equalsIgnoreCase("false")) {
                throw new IllegalArgumentException("option kafka.enable.idempotence must be true or false, got '" + idem + "'");
            }
            ws.idempotent = Boolean.parseBoolean(idem) && ws.acks == -1;
            ws.batchSize = positive(producerOption(o, "batch.size", String.valueOf(1 << 20)), "batch.size");
            ws.bufferMemory = positive(producerOption(o, "buffer.memory", String.valueOf(32 << 20)), "buffer.memory");
            ws.maxInFlight = positive(producerOption(o, "max.in.flight.requests.per.connection", "5"),
                    "max.in.flight.requests.per.connection");
            if (ws.idempotent && ws.maxInFlight > 5) {
                throw new IllegalArgumentException("option kafka.max.in.flight.requests.per.connection must be at most 5 "
                        + "for an idempotent producer, as Kafka's");
            }
            ws.requestTimeoutMs = positive(producerOption(o, "request.timeout.ms", "30000"), "request.timeout.ms");
            ws.deliveryTimeoutMs = positive(producerOption(o, "delivery.timeout.ms", "120000"), "delivery.timeout.ms");
            String codec = producerOption(o, "compression.type", "none").strip().toLowerCase(Locale.ROOT);
            ws.codec = switch (codec) {
                case "none" -> BatchBuilder.CODEC_NONE;
                case "gzip" -> BatchBuilder.CODEC_GZIP;
                case "snappy" -> BatchBuilder.CODEC_SNAPPY;
                case "lz4" -> BatchBuilder.CODEC_LZ4;
                case "zstd" -> BatchBuilder.CODEC_ZSTD;
                default -> throw new IllegalArgumentException("option kafka.compression.type must be none, gzip, "
                        + "snappy, lz4 or zstd, got '" + codec + "'");
            };
            String[] names = schema.fieldNames();
            for (int i = 0; i < names.length; i++) {
                DataType t = schema.fields()[i].dataType();
                switch (names[i].toLowerCase(Locale.ROOT)) {
                    case "key" -> {
                        ws.keyCol = i;
                        ws.keyIsString = binaryOrString(t, "key");
                    }
                    case "value" -> {
                        ws.valueCol = i;
                        ws.valueIsString = binaryOrString(t, "value");
                    }
                    case "topic" -> {
                        if (!(t instanceof StringType)) {
                            throw new IllegalArgumentException("the topic column must be a string, got " + t.simpleString());
                        }
                        ws.topicCol = i;
                    }
                    case "partition" -> {
                        if (!(t instanceof IntegerType)) {
                            throw new IllegalArgumentException("the partition column must be an int, got " + t.simpleString());
                        }
                        ws.partitionCol = i;
                    }
                    case "headers" -> {
                        DataType want = DataTypes.createArrayType(new StructType().add("key", DataTypes.StringType)
                                .add("value", DataTypes.BinaryType));
                        if (!DataType.equalsIgnoreNullability(t, want)) {
                            throw new IllegalArgumentException("the headers column must be "
                                    + want.simpleString() + ", got " + t.simpleString());
                        }
                        ws.headersCol = i;
                    }
                    default -> { } // other columns are ignored, as by Spark's Kafka sink
                }
            }
            if (ws.valueCol < 0) {
                throw new IllegalArgumentException("the DataFrame needs a value column (binary or string)");
            }
            if (ws.topic == null && ws.topicCol < 0) {
                throw new IllegalArgumentException("no topic: give the topic option or a topic column");
            }
            return ws;
        }

        /** spark-sql-kafka's ``kafka.``-prefixed producer option, or the ``tidelog`` sink's plain name. */
        private static String producerOption(CaseInsensitiveStringMap o, String name, String dflt) {
            String v = o.get("kafka." + name);
            return v != null ? v : o.getOrDefault(name, dflt);
        }

        private static int positive(String v, String name) {
            return positiveOption(v, "kafka." + name);
        }

        private static boolean binaryOrString(DataType t, String column) {
            if (t instanceof BinaryType) {
                return false;
            }
            if (t instanceof StringType) {
                return true;
            }
            throw new IllegalArgumentException("the " + column + " column must be binary or string, got " + t.simpleString());
        }
    }

    /** The write of a batch query, or of each micro-batch of a stream: every task writes its rows
     * (``TopicWriter``: acknowledged before the task commits); at least once, as Spark's Kafka sink (a failed
     * task's rows stay written; a task or micro-batch run again writes again), so nothing is left to commit. */
    static final class TopicWrite implements BatchWrite, StreamingWrite {
        private final TopicWriter.WriteSettings ws;

        TopicWrite(TopicWriter.WriteSettings ws) {
            this.ws = ws;
        }

        @Override
        public boolean useCommitCoordinator() {
            return true; // both interfaces' default: one committed attempt per task
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            TopicWriter.WriteSettings settings = ws;
            return (DataWriterFactory) (partitionId, taskId) -> new TopicWriter(settings);
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            TopicWriter.WriteSettings settings = ws;
            return (StreamingDataWriterFactory) (partitionId, taskId, epochId) -> new TopicWriter(settings);
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            // acknowledged already
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            // at least once: what was sent stays
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            // acknowledged already
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            // at least once: what was sent stays
        }
    }

    /** A stream's position: each partition's next offset, as ``{"topic":{"0":42}}`` (the tidelog source's form). */
    static final class TopicOffset extends Offset {
        final Map<String, Map<Integer, Long>> offsets;

        TopicOffset(Map<String, Map<Integer, Long>> offsets) {
            this.offsets = offsets;
        }

        @Override
        public String json() {
            Map<String, Map<String, Long>> out = new TreeMap<>();
            for (Map.Entry<String, Map<Integer, Long>> t : offsets.entrySet()) {
                Map<String, Long> parts = new java.util.LinkedHashMap<>();
                new TreeMap<>(t.getValue()).forEach((p, o) -> parts.put(String.valueOf(p), o));
                out.put(t.getKey(), parts);
            }
            try {
                return new ObjectMapper().writeValueAsString(out);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        static TopicOffset parse(String json) {
            Map<String, Map<Integer, Long>> offsets = new TreeMap<>();
            Options.parseOffsets(json, "the checkpoint's offset").forEach((t, ps) -> offsets.put(t, new TreeMap<>(ps)));
            return new TopicOffset(offsets);
        }

        long get(String topic, int partition, long dflt) {
            Map<Integer, Long> ps = offsets.get(topic);
            Long o = ps == null ? null : ps.get(partition);
            return o == null ? dflt : o;
        }
    }

    /**
     * ``spark.readStream.format("tidelog-jvm")``: micro-batches of what each partition gained (up to its last
     * stable offset under read_committed), ``maxOffsetsPerTrigger`` shared among partitions by what they have,
     * ``Trigger.AvailableNow`` up to the offsets of the query's start. A partition that appears is read from its
     * earliest offset; one whose log now ends before the checkpoint's offset (the topic deleted and created again)
     * fails the query, or with ``failOnDataLoss=false`` is read again from its earliest offset.
     */
    static final class TopicStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
        private final Options opts;
        private Map<String, Map<Integer, long[]>> availableNow; // the snapshot at the start of an AvailableNow query

        TopicStream(Options opts) {
            this.opts = opts;
        }

        private Map<String, Map<Integer, long[]>> snapshot() {
            try {
                return Planner.snapshot(opts);
            } catch (IOException e) {
                throw new UncheckedIOException("reading the offsets of " + NAME + ": " + e.getMessage(), e);
            }
        }

        @Override
        public Offset initialOffset() {
            return new TopicOffset(Planner.resolve(opts.starting == null ? "latest" : opts.starting, "startingOffsets",
                    true, snapshot()));
        }

        @Override
        public Offset latestOffset() {
            throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is the one to call");
        }

        @Override
        public Offset latestOffset(Offset startOffset, ReadLimit limit) {
            TopicOffset start = (TopicOffset) startOffset;
            Map<String, Map<Integer, long[]>> snap = availableNow != null ? availableNow : snapshot();
            Map<String, Map<Integer, Long>> end = new TreeMap<>();
            // a partition the snapshot lacks (its topic briefly unreadable) keeps its offset: it is not dropped from
            // the checkpoint, which would read it again from its earliest offset when it is back
            start.offsets.forEach((t, ps) -> {
                if (!snap.containsKey(t)) {
                    end.put(t, new TreeMap<>(ps));
                }
            });
            long total = 0;
            for (Map.Entry<String, Map<Integer, long[]>> t : snap.entrySet()) {
                Map<Integer, Long> parts = new TreeMap<>();
                for (Map.Entry<Integer, long[]> p : t.getValue().entrySet()) {
                    long from = start.get(t.getKey(), p.getKey(), p.getValue()[0]);
                    parts.put(p.getKey(), p.getValue()[1]);
                    total += Math.max(0, p.getValue()[1] - from);
                }
                end.put(t.getKey(), parts);
            }
            if (limit instanceof ReadMaxRows max && total > max.maxRows()) {
                // each partition's share of maxRows by what it has, the rest by largest remainder: exactly maxRows
                List<Map.Entry<Integer, Long>> entries = new ArrayList<>();
                List<long[]> shares = new ArrayList<>(); // {from, have, take}
                List<Double> remainders = new ArrayList<>();
                long given = 0;
                for (Map.Entry<String, Map<Integer, Long>> t : end.entrySet()) {
                    if (!snap.containsKey(t.getKey())) {
                        continue; // carried forward: nothing to read there now
                    }
                    for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
                        long from = start.get(t.getKey(), p.getKey(), snap.get(t.getKey()).get(p.getKey())[0]);
                        long have = Math.max(0, p.getValue() - from);
                        double exact = (double) have * max.maxRows() / total;
                        long take = (long) Math.floor(exact);
                        entries.add(p);
                        shares.add(new long[] {from, have, take});
                        remainders.add(exact - take);
                        given += take;
                    }
                }
                Integer[] order = new Integer[entries.size()];
                for (int i = 0; i < order.length; i++) {
                    order[i] = i;
                }
                Arrays.sort(order, (x, y) -> Double.compare(remainders.get(y), remainders.get(x)));
                for (int i : order) {
                    if (given >= max.maxRows()) {
                        break;
                    }
                    long[] sh = shares.get(i);
                    if (sh[2] < sh[1]) {
                        sh[2]++;
                        given++;
                    }
                }
                for (int i = 0; i < entries.size(); i++) {
                    long[] sh = shares.get(i);
                    if (sh[1] > 0) {
                        entries.get(i).setValue(sh[0] + sh[2]);
                    }
                }
            }
            return new TopicOffset(end);
        }

        @Override
        public ReadLimit getDefaultReadLimit() {
            return opts.maxOffsetsPerTrigger != null ? ReadLimit.maxRows(opts.maxOffsetsPerTrigger) : ReadLimit.allAvailable();
        }

        @Override
        public void prepareForTriggerAvailableNow() {
            availableNow = snapshot();
        }

        @Override
        public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
            TopicOffset start = (TopicOffset) startOffset;
            TopicOffset end = (TopicOffset) endOffset;
            Map<String, Map<Integer, long[]>> snap = null;
            List<OffsetRange> ranges = new ArrayList<>();
            for (Map.Entry<String, Map<Integer, Long>> t : end.offsets.entrySet()) {
                for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
                    long until = p.getValue();
                    long from = start.get(t.getKey(), p.getKey(), -1);
                    if (from < 0 || until < from) {
                        if (snap == null) {
                            snap = snapshot();
                        }
                        long[] el = snap.getOrDefault(t.getKey(), Map.of()).get(p.getKey());
                        long earliest = el == null ? 0 : el[0];
                        if (from >= 0 && opts.settings.failOnDataLoss) {
                            throw new IllegalStateException("the offset of " + t.getKey() + "-" + p.getKey() + " went from "
                                    + from + " to " + until + " (the topic was deleted and created again?): some data may "
                                    + "have been lost. Set failOnDataLoss=false to read that partition again from its "
                                    + "earliest offset");
                        }
                        from = Math.min(earliest, until);
                    }
                    if (until > from) {
                        ranges.add(new OffsetRange(t.getKey(), p.getKey(), from, until));
                    }
                }
            }
            return Planner.split(ranges, opts.minPartitions).toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(opts.settings);
        }

        @Override
        public Offset deserializeOffset(String json) {
            return TopicOffset.parse(json);
        }

        @Override
        public void commit(Offset end) {
            // the checkpoint is the source of truth; nothing is committed to the brokers
        }

        @Override
        public void stop() {
            // no connection is kept between micro-batches
        }
    }

    /** The options, checked on the driver before any job runs. */
    static final class Options implements Serializable {
        Settings settings;
        List<String> subscribe;
        String pattern;
        Map<String, List<Integer>> assign;
        String starting; // null: not given (earliest for a batch query, latest for a stream)
        String ending; // null: not given (latest)
        Integer minPartitions;
        Long maxOffsetsPerTrigger;

        static Options parse(CaseInsensitiveStringMap o) {
            Options out = new Options();
            String servers = o.get("kafka.bootstrap.servers");
            if (servers == null || servers.isBlank()) {
                throw new IllegalArgumentException("option kafka.bootstrap.servers is required: the brokers' Kafka "
                        + "listener (host:port,...; cluster.json's kafka_bootstrap)");
            }
            Security security = Security.parse(o);
            for (String k : List.of("startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp",
                    "endingOffsetsByTimestamp", "commitOffsetsToGroup")) {
                if (o.containsKey(k)) {
                    throw new IllegalArgumentException("option " + k + " is not supported by format(\"" + NAME
                            + "\"): use format(\"tidelog\")");
                }
            }
            List<String> strategies = new ArrayList<>();
            for (String k : List.of("subscribe", "subscribePattern", "assign")) {
                if (o.get(k) != null && !o.get(k).isBlank()) {
                    strategies.add(k);
                }
            }
            if (strategies.size() != 1) {
                throw new IllegalArgumentException("exactly one of subscribe, subscribePattern or assign is required");
            }
            if (strategies.get(0).equals("subscribe")) {
                out.subscribe = new ArrayList<>();
                for (String t : o.get("subscribe").split(",")) {
                    if (!t.isBlank()) {
                        out.subscribe.add(t.strip());
                    }
                }
            } else if (strategies.get(0).equals("subscribePattern")) {
                out.pattern = o.get("subscribePattern");
                try {
                    Pattern.compile(out.pattern);
                } catch (PatternSyntaxException e) {
                    throw new IllegalArgumentException("option subscribePattern is not a valid regex: " + e.getMessage());
                }
            } else {
                out.assign = parseAssign(o.get("assign"));
            }
            out.starting = offsetsSpec(o.get("startingOffsets"), "startingOffsets", null);
            out.ending = offsetsSpec(o.get("endingOffsets"), "endingOffsets", null);
            if ("earliest".equals(out.ending)) {
                throw new IllegalArgumentException("endingOffsets cannot be earliest");
            }
            String perTrigger = o.get("maxOffsetsPerTrigger");
            if (perTrigger != null) {
                try {
                    out.maxOffsetsPerTrigger = Long.parseLong(perTrigger.strip());
                } catch (NumberFormatException e) {
                    out.maxOffsetsPerTrigger = -1L;
                }
                if (out.maxOffsetsPerTrigger <= 0) {
                    throw new IllegalArgumentException("option maxOffsetsPerTrigger must be a positive integer, got '"
                            + perTrigger + "'");
                }
            }
            String min = o.get("minPartitions");
            if (min != null) {
                try {
                    out.minPartitions = Integer.parseInt(min.strip());
                } catch (NumberFormatException e) {
                    out.minPartitions = -1;
                }
                if (out.minPartitions <= 0) {
                    throw new IllegalArgumentException("option minPartitions must be a positive integer, got '" + min + "'");
                }
            }
            String isolation = o.getOrDefault("kafka.isolation.level", "read_uncommitted").strip().toLowerCase(Locale.ROOT);
            if (!isolation.equals("read_uncommitted") && !isolation.equals("read_committed")) {
                throw new IllegalArgumentException("option kafka.isolation.level must be read_uncommitted or "
                        + "read_committed, got '" + o.get("kafka.isolation.level") + "'");
            }
            Settings s = new Settings();
            s.bootstrap = Arrays.stream(servers.split(",")).map(String::strip).filter(x -> !x.isEmpty())
                    .toArray(String[]::new);
            s.isolation = isolation.equals("read_committed") ? 1 : 0;
            s.includeHeaders = bool(o, "includeHeaders", false);
            s.failOnDataLoss = bool(o, "failOnDataLoss", true);
            s.maxPartitionFetchBytes = positive(o, "kafka.max.partition.fetch.bytes", 8 << 20);
            s.requestTimeoutMs = positive(o, "kafka.request.timeout.ms", 30_000);
            s.security = security;
            out.settings = s;
            return out;
        }

        private static boolean bool(CaseInsensitiveStringMap o, String k, boolean dflt) {
            String v = o.get(k);
            if (v == null) {
                return dflt;
            }
            if (v.equalsIgnoreCase("true") || v.equalsIgnoreCase("false")) {
                return Boolean.parseBoolean(v);
            }
            throw new IllegalArgumentException("option " + k + " must be true or false, got '" + v + "'");
        }

        private static int positive(CaseInsensitiveStringMap o, String k, int dflt) {
            String v = o.get(k);
            return v == null ? dflt : positiveOption(v, k);
        }

        private static String offsetsSpec(String v, String name, String dflt) {
            if (v == null) {
                return dflt;
            }
            String s = v.strip();
            if (s.equalsIgnoreCase("earliest") || s.equalsIgnoreCase("latest")) {
                return s.toLowerCase(Locale.ROOT);
            }
            parseOffsets(s, name); // refuse it now, on the driver
            return s;
        }

        static Map<String, Map<Integer, Long>> parseOffsets(String json, String name) {
            JsonNode root;
            try {
                root = new ObjectMapper().readTree(json);
            } catch (IOException e) {
                root = null;
            }
            if (root == null || !root.isObject()) {
                throw new IllegalArgumentException("option " + name + " must be earliest, latest or JSON like "
                        + "{\"topic\":{\"0\":23}}, got '" + json + "'");
            }
            Map<String, Map<Integer, Long>> out = new HashMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = root.properties().iterator(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> t = it.next();
                if (!t.getValue().isObject()) {
                    throw new IllegalArgumentException("option " + name + " JSON must map topics to {partition: offset}");
                }
                Map<Integer, Long> parts = new HashMap<>();
                for (Iterator<Map.Entry<String, JsonNode>> ps = t.getValue().properties().iterator(); ps.hasNext(); ) {
                    Map.Entry<String, JsonNode> p = ps.next();
                    int partition;
                    try {
                        partition = Integer.parseInt(p.getKey());
                    } catch (NumberFormatException e) {
                        throw new IllegalArgumentException("option " + name + ": bad partition " + t.getKey() + "/" + p.getKey());
                    }
                    if (!p.getValue().canConvertToLong() || !p.getValue().isIntegralNumber()) {
                        throw new IllegalArgumentException("option " + name + ": bad offset " + t.getKey() + "/"
                                + p.getKey() + "=" + p.getValue());
                    }
                    parts.put(partition, p.getValue().asLong()); // -2 earliest, -1 latest
                }
                out.put(t.getKey(), parts);
            }
            return out;
        }

        private static Map<String, List<Integer>> parseAssign(String json) {
            String msg = "option assign must be JSON like {\"topic\":[0,1]}";
            JsonNode root;
            try {
                root = new ObjectMapper().readTree(json);
            } catch (IOException e) {
                throw new IllegalArgumentException(msg);
            }
            if (root == null || !root.isObject()) {
                throw new IllegalArgumentException(msg);
            }
            Map<String, List<Integer>> out = new TreeMap<>();
            for (Iterator<Map.Entry<String, JsonNode>> it = root.properties().iterator(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> t = it.next();
                if (!t.getValue().isArray()) {
                    throw new IllegalArgumentException(msg);
                }
                List<Integer> ps = new ArrayList<>();
                for (JsonNode p : t.getValue()) {
                    if (!p.isInt()) {
                        throw new IllegalArgumentException(msg);
                    }
                    ps.add(p.asInt());
                }
                out.put(t.getKey(), ps);
            }
            return out;
        }
    }

    static final class TopicScan implements Scan, Batch {
        private final StructType schema;
        private final Options opts;
        private InputPartition[] planned;

        TopicScan(StructType schema, Options opts) {
            this.schema = schema;
            this.opts = opts;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public String description() {
            return NAME + "[" + (opts.subscribe != null ? "subscribe=" + opts.subscribe
                    : opts.pattern != null ? "subscribePattern=" + opts.pattern : "assign=" + opts.assign.keySet()) + "]";
        }

        @Override
        public Batch toBatch() {
            if ("latest".equals(opts.starting)) {
                throw new IllegalArgumentException("startingOffsets cannot be latest for a batch query");
            }
            if (opts.maxOffsetsPerTrigger != null) {
                throw new IllegalArgumentException("maxOffsetsPerTrigger is for streaming queries only");
            }
            return this;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            if (opts.ending != null) {
                throw new IllegalArgumentException("endingOffsets is for batch queries only");
            }
            return new TopicStream(opts);
        }

        @Override
        public InputPartition[] planInputPartitions() {
            if (planned == null) {
                try {
                    planned = Planner.plan(opts).toArray(new InputPartition[0]);
                } catch (IOException e) {
                    throw new UncheckedIOException("planning the read of " + description() + ": " + e.getMessage(), e);
                }
            }
            return planned;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            Settings s = opts.settings;
            return new ReaderFactory(s);
        }
    }

    static final class ReaderFactory implements PartitionReaderFactory {
        private final Settings settings;

        ReaderFactory(Settings settings) {
            this.settings = settings;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new RangeReader((OffsetRange) partition, settings);
        }
    }

    /** Which offsets of which partitions: ListOffsets at each partition's leader, then the ranges. */
    static final class Planner {

        /** Each subscribed partition's {earliest, latest} offsets (latest: the last stable offset under
         * read_committed); topics that do not exist (yet) are left out, as by the tidelog source. */
        static Map<String, Map<Integer, long[]>> snapshot(Options opts) throws IOException {
            Settings s = opts.settings;
            long deadline = System.currentTimeMillis() + s.requestTimeoutMs;
            IOException last = null;
            for (int attempt = 0; ; attempt++) {
                for (String bootstrap : s.bootstrap) {
                    try (KafkaWire w = new KafkaWire(bootstrap, s.requestTimeoutMs, s.security)) {
                        return snapshot(opts, w);
                    } catch (IOException e) {
                        if (TopicWriter.fatal(e)) {
                            throw e;
                        }
                        last = e; // a leader moving (no leader, NOT_LEADER_OR_FOLLOWER): ask again
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    throw last != null ? last : new IOException("no bootstrap server");
                }
                try {
                    Thread.sleep(Math.min(100L << Math.min(attempt, 3), 1000L));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IOException("interrupted", e);
                }
            }
        }

        private static Map<String, Map<Integer, long[]>> snapshot(Options opts, KafkaWire w) throws IOException {
            List<String> topics;
            if (opts.subscribe != null) {
                topics = opts.subscribe;
            } else if (opts.assign != null) {
                topics = new ArrayList<>(opts.assign.keySet());
            } else {
                topics = null;
            }
            KafkaWire.Metadata md = w.metadata(topics, false);
            Map<String, Map<Integer, long[]>> out = new TreeMap<>();
            for (Map.Entry<String, Map<Integer, String>> t : md.leaders().entrySet()) {
                String name = t.getKey();
                Short err = md.topicErrors().get(name);
                if (err != null && err == 29) {
                    throw new IOException("TOPIC_AUTHORIZATION_FAILED: not authorized to access topic '" + name + "'");
                }
                if (err != null || t.getValue().isEmpty()) {
                    continue; // not (yet) existing: nothing to read, as the tidelog source
                }
                if (opts.pattern != null && !Pattern.compile(opts.pattern).matcher(name).matches()) {
                    continue;
                }
                List<Integer> parts = new ArrayList<>(t.getValue().keySet());
                if (opts.assign != null) {
                    for (int p : opts.assign.get(name)) {
                        if (!parts.contains(p)) {
                            throw new IllegalArgumentException("assign names " + name + "-" + p + ", but " + name
                                    + " has partitions 0 to " + (parts.size() - 1));
                        }
                    }
                    parts.retainAll(opts.assign.get(name));
                }
                parts.sort(Comparator.naturalOrder());
                Map<Integer, long[]> earliest = offsets(md, name, parts, -2, opts.settings.isolation, opts.settings);
                Map<Integer, long[]> latest = offsets(md, name, parts, -1, opts.settings.isolation, opts.settings);
                Map<Integer, long[]> both = new TreeMap<>();
                for (int p : parts) {
                    both.put(p, new long[] {earliest.get(p)[1], latest.get(p)[1]});
                }
                out.put(name, both);
            }
            return out;
        }

        /** Offsets per partition of ``spec`` (earliest, latest or JSON with -2 / -1) against a snapshot. */
        static Map<String, Map<Integer, Long>> resolve(String spec, String name, boolean starting,
                                                       Map<String, Map<Integer, long[]>> snap) {
            Map<String, Map<Integer, Long>> json = spec != null && spec.startsWith("{")
                    ? Options.parseOffsets(spec, name) : Map.of();
            Map<String, Map<Integer, Long>> out = new TreeMap<>();
            for (Map.Entry<String, Map<Integer, long[]>> t : snap.entrySet()) {
                Map<Integer, Long> parts = new TreeMap<>();
                for (Map.Entry<Integer, long[]> p : t.getValue().entrySet()) {
                    long[] el = p.getValue();
                    long off;
                    if ("earliest".equals(spec)) {
                        off = el[0];
                    } else if ("latest".equals(spec)) {
                        off = el[1];
                    } else {
                        off = pick(json, t.getKey(), p.getKey(), starting, el[0], el[1]);
                    }
                    parts.put(p.getKey(), off);
                }
                out.put(t.getKey(), parts);
            }
            return out;
        }

        /** A batch query's ranges: from the offsets of the snapshot (which retries a moving leader). */
        static List<OffsetRange> plan(Options opts) throws IOException {
            Map<String, Map<Integer, long[]>> snap = snapshot(opts);
            Map<String, Map<Integer, Long>> from = resolve(opts.starting == null ? "earliest" : opts.starting,
                    "startingOffsets", true, snap);
            Map<String, Map<Integer, Long>> until = resolve(opts.ending == null ? "latest" : opts.ending,
                    "endingOffsets", false, snap);
            List<OffsetRange> ranges = new ArrayList<>();
            for (Map.Entry<String, Map<Integer, Long>> t : until.entrySet()) {
                for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
                    long start = from.get(t.getKey()).get(p.getKey());
                    if (p.getValue() > start) {
                        ranges.add(new OffsetRange(t.getKey(), p.getKey(), start, p.getValue()));
                    }
                }
            }
            return split(ranges, opts.minPartitions);
        }

        private static long pick(Map<String, Map<Integer, Long>> json, String topic, int p, boolean starting,
                                 long earliest, long latest) {
            Map<Integer, Long> parts = json.get(topic);
            Long off = parts == null ? null : parts.get(p);
            if (off == null) {
                if (parts != null) {
                    throw new IllegalArgumentException((starting ? "startingOffsets" : "endingOffsets")
                            + " has no offset for " + topic + "-" + p);
                }
                off = starting ? -2L : -1L;
            }
            if (off == -2) {
                return earliest;
            }
            if (off == -1) {
                return latest;
            }
            if (off < 0 || off > latest) {
                throw new IllegalArgumentException((starting ? "startingOffsets" : "endingOffsets") + " gives " + off
                        + " for " + topic + "-" + p + ", outside its log (" + earliest + " to " + latest + ")");
            }
            return off;
        }

        private static Map<Integer, long[]> offsets(KafkaWire.Metadata md, String topic, List<Integer> parts, long ts,
                                                    int isolation, Settings s) throws IOException {
            Map<String, List<Integer>> byLeader = new HashMap<>();
            for (int p : parts) {
                String leader = md.leaders().get(topic).get(p);
                if (leader == null) {
                    throw new IOException("LEADER_NOT_AVAILABLE: " + topic + "-" + p + " has no leader");
                }
                byLeader.computeIfAbsent(leader, k -> new ArrayList<>()).add(p);
            }
            Map<Integer, long[]> out = new HashMap<>();
            for (Map.Entry<String, List<Integer>> e : byLeader.entrySet()) {
                try (KafkaWire w = new KafkaWire(e.getKey(), s.requestTimeoutMs, s.security)) {
                    Map<Integer, long[]> got = w.listOffsets(topic, e.getValue(), ts, isolation);
                    for (int p : e.getValue()) {
                        long[] r = got.get(p);
                        if (r == null || r[0] != 0) {
                            throw new IOException("ListOffsets of " + topic + "-" + p + " failed with Kafka error code "
                                    + (r == null ? "(no answer)" : String.valueOf(r[0])));
                        }
                        out.put(p, r);
                    }
                }
            }
            return out;
        }

        /** Split ranges to reach ``minPartitions`` (largest remainder, never below one record per range). */
        static List<OffsetRange> split(List<OffsetRange> ranges, Integer minPartitions) {
            if (minPartitions == null || ranges.size() >= minPartitions) {
                return ranges;
            }
            long total = 0;
            for (OffsetRange r : ranges) {
                total += r.until - r.from;
            }
            List<OffsetRange> out = new ArrayList<>();
            if (total <= minPartitions) {
                for (OffsetRange r : ranges) {
                    for (long o = r.from; o < r.until; o++) {
                        out.add(new OffsetRange(r.topic, r.partition, o, o + 1));
                    }
                }
                return out;
            }
            int n = ranges.size();
            double[] shares = new double[n];
            long[] pieces = new long[n];
            long given = 0;
            Integer[] order = new Integer[n];
            for (int i = 0; i < n; i++) {
                OffsetRange r = ranges.get(i);
                shares[i] = (double) minPartitions * (r.until - r.from) / total;
                pieces[i] = Math.max(1, (long) shares[i]);
                given += pieces[i];
                order[i] = i;
            }
            Arrays.sort(order, (x, y) -> Double.compare(shares[y] - Math.floor(shares[y]), shares[x] - Math.floor(shares[x])));
            long left = minPartitions - given;
            while (left > 0) {
                boolean moved = false;
                for (int i : order) {
                    OffsetRange r = ranges.get(i);
                    if (left > 0 && pieces[i] < r.until - r.from) {
                        pieces[i]++;
                        left--;
                        moved = true;
                    }
                }
                if (!moved) {
                    break;
                }
            }
            for (int i = 0; i < n; i++) {
                OffsetRange r = ranges.get(i);
                long size = r.until - r.from;
                for (long j = 0; j < pieces[i]; j++) {
                    out.add(new OffsetRange(r.topic, r.partition, r.from + size * j / pieces[i],
                            r.from + size * (j + 1) / pieces[i]));
                }
            }
            return out;
        }
    }
}
