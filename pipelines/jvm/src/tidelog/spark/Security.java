package tidelog.spark;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import javax.crypto.Mac;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * How the reader's and writer's connections reach a secure cluster, with the ``tidelog`` source's option names
 * (spark-sql-kafka's, the CA as PEM): ``kafka.security.protocol`` PLAINTEXT, SSL or SASL_SSL; SCRAM-SHA-512
 * (default) or SCRAM-SHA-256 with ``kafka.sasl.jaas.config`` or ``kafka.sasl.username`` / ``password``;
 * ``kafka.ssl.ca.location`` (the cluster's CA), and for mutual TLS ``kafka.ssl.certificate.location`` with
 * ``kafka.ssl.key.location`` (PEM, PKCS#8, unencrypted). The broker's certificate is checked against the CA and
 * the host name (Kafka's ``ssl.endpoint.identification.algorithm=https``); SCRAM (RFC 5802, 7677) checks the
 * server's nonce and signature.
 */
final class Security implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String PROTOCOL = "kafka.security.protocol", MECHANISM = "kafka.sasl.mechanism",
            JAAS = "kafka.sasl.jaas.config", USERNAME = "kafka.sasl.username", PASSWORD = "kafka.sasl.password";
    private static final List<String> CA = List.of("kafka.ssl.ca.location", "kafka.ssl.cafile");
    private static final List<String> CERT = List.of("kafka.ssl.certificate.location", "kafka.ssl.certfile");
    private static final List<String> KEY = List.of("kafka.ssl.key.location", "kafka.ssl.keyfile");
    private static final Set<String> KEYSTORES = Set.of("kafka.ssl.truststore.location", "kafka.ssl.truststore.password",
            "kafka.ssl.keystore.location", "kafka.ssl.keystore.password", "kafka.ssl.key.password");
    private static final Set<String> FLAGS = Set.of("required", "requisite", "sufficient", "optional");
    static final short SASL_HANDSHAKE = 17, SASL_AUTHENTICATE = 36;

    String protocol = "PLAINTEXT";
    String mechanism;
    String username;
    String password;
    String caFile;
    String certFile;
    String keyFile;
    private transient SSLContext context;

    boolean tls() {
        return !protocol.equals("PLAINTEXT");
    }

    static Security parse(CaseInsensitiveStringMap o) {
        Security s = new Security();
        for (String k : KEYSTORES) {
            if (o.get(k) != null) {
                throw new IllegalArgumentException("option " + k + " is not supported (a Java keystore setting): give "
                        + "the CA as PEM with kafka.ssl.ca.location, a client certificate and key as PEM with "
                        + "kafka.ssl.certificate.location and kafka.ssl.key.location");
            }
        }
        String raw = o.get(PROTOCOL);
        s.protocol = raw == null ? "PLAINTEXT" : raw.strip().toUpperCase(Locale.ROOT);
        if (s.protocol.equals("SASL_PLAINTEXT")) {
            throw new IllegalArgumentException("option " + PROTOCOL + "=SASL_PLAINTEXT is not supported: Tidelog "
                    + "takes credentials over TLS only; use SASL_SSL");
        }
        if (!Set.of("PLAINTEXT", "SSL", "SASL_SSL").contains(s.protocol)) {
            throw new IllegalArgumentException("option " + PROTOCOL + " must be one of PLAINTEXT, SSL, SASL_SSL, got '"
                    + raw + "'");
        }
        s.caFile = first(o, CA);
        s.certFile = first(o, CERT);
        s.keyFile = first(o, KEY);
        List<String> sasl = new ArrayList<>();
        for (String k : List.of(MECHANISM, JAAS, USERNAME, PASSWORD)) {
            if (o.get(k) != null && !o.get(k).isEmpty()) {
                sasl.add(k);
            }
        }
        if (s.protocol.equals("PLAINTEXT")) {
            if (!sasl.isEmpty() || s.caFile != null || s.certFile != null || s.keyFile != null) {
                throw new IllegalArgumentException("option " + (sasl.isEmpty() ? "kafka.ssl.*" : sasl.get(0))
                        + " needs " + PROTOCOL + "=SASL_SSL or SSL (it is PLAINTEXT)");
            }
            return s;
        }
        if (s.caFile == null) {
            throw new IllegalArgumentException(PROTOCOL + "=" + s.protocol + " needs the cluster's CA certificate (PEM): "
                    + "option kafka.ssl.ca.location; Kafka's JKS truststore is not supported");
        }
        if ((s.certFile == null) != (s.keyFile == null)) {
            throw new IllegalArgumentException("options kafka.ssl.certificate.location and kafka.ssl.key.location go "
                    + "together (mutual TLS)");
        }
        if (s.protocol.equals("SSL")) {
            if (!sasl.isEmpty()) {
                throw new IllegalArgumentException("option " + sasl.get(0) + " needs " + PROTOCOL + "=SASL_SSL (it is SSL)");
            }
            return s;
        }
        String mech = o.get(MECHANISM);
        s.mechanism = mech == null ? "SCRAM-SHA-512" : mech.strip().toUpperCase(Locale.ROOT);
        if (!s.mechanism.equals("SCRAM-SHA-512") && !s.mechanism.equals("SCRAM-SHA-256")) {
            throw new IllegalArgumentException("option " + MECHANISM + " must be SCRAM-SHA-512 or SCRAM-SHA-256, got '"
                    + mech + "'");
        }
        String jaas = o.get(JAAS);
        if (jaas != null && (o.get(USERNAME) != null || o.get(PASSWORD) != null)) {
            throw new IllegalArgumentException("give either " + JAAS + " or " + USERNAME + " / " + PASSWORD + ", not both");
        }
        if (jaas != null) {
            Map<String, String> values = jaas(jaas);
            s.username = values.get("username");
            s.password = values.get("password");
        } else {
            s.username = o.get(USERNAME);
            s.password = o.get(PASSWORD);
        }
        if (s.username == null || s.username.isEmpty()) {
            throw new IllegalArgumentException(PROTOCOL + "=SASL_SSL needs credentials: option " + JAAS + " ("
                    + "'org.apache.kafka.common.security.scram.ScramLoginModule required username=\"...\" "
                    + "password=\"...\";') or " + USERNAME + " and " + PASSWORD);
        }
        if (s.password == null || s.password.isEmpty()) {
            throw new IllegalArgumentException("no password given for user '" + s.username + "'");
        }
        return s;
    }

    private static String first(CaseInsensitiveStringMap o, List<String> names) {
        String found = null;
        for (String n : names) {
            String v = o.get(n);
            if (v != null && !v.isBlank()) {
                if (found != null) {
                    throw new IllegalArgumentException("options " + names.get(0) + " and " + n + " name the same file: "
                            + "give one");
                }
                found = v.strip();
            }
        }
        return found;
    }

    /** Kafka's JAAS syntax, one SCRAM login module: ``Module flag key=value ... ;`` (values quoted or bare). */
    static Map<String, String> jaas(String text) {
        List<String[]> tokens = new ArrayList<>(); // {kind, text}: w (word), s (string), =, ;
        int i = 0;
        int n = text.length();
        while (i < n) {
            char c = text.charAt(i);
            if (Character.isWhitespace(c)) {
                i++;
            } else if (c == '=' || c == ';') {
                tokens.add(new String[] {String.valueOf(c), String.valueOf(c)});
                i++;
            } else if (c == '"') {
                StringBuilder b = new StringBuilder();
                i++;
                while (i < n && text.charAt(i) != '"') {
                    if (text.charAt(i) == '\\' && i + 1 < n) {
                        i++;
                    }
                    b.append(text.charAt(i++));
                }
                if (i >= n) {
                    throw new IllegalArgumentException("option " + JAAS + ": a quoted value is not closed");
                }
                tokens.add(new String[] {"s", b.toString()});
                i++;
            } else {
                int start = i;
                while (i < n && !Character.isWhitespace(text.charAt(i)) && "=;\"".indexOf(text.charAt(i)) < 0) {
                    i++;
                }
                tokens.add(new String[] {"w", text.substring(start, i)});
            }
        }
        if (tokens.size() < 2 || !tokens.get(0)[0].equals("w") || !tokens.get(1)[0].equals("w")) {
            throw new IllegalArgumentException("option " + JAAS + " must be 'LoginModule flag key=\"value\" ...;'");
        }
        String module = tokens.get(0)[1];
        if (!module.endsWith("ScramLoginModule")) {
            throw new IllegalArgumentException("option " + JAAS + " names " + module + ": Tidelog authenticates with "
                    + "SCRAM, use org.apache.kafka.common.security.scram.ScramLoginModule");
        }
        if (!FLAGS.contains(tokens.get(1)[1].toLowerCase(Locale.ROOT))) {
            throw new IllegalArgumentException("option " + JAAS + ": '" + tokens.get(1)[1] + "' is not a control flag "
                    + "(required, requisite, sufficient, optional)");
        }
        Map<String, String> values = new HashMap<>();
        int k = 2;
        while (k < tokens.size() && !tokens.get(k)[0].equals(";")) {
            if (k + 2 >= tokens.size() || !tokens.get(k)[0].equals("w") || !tokens.get(k + 1)[0].equals("=")
                    || tokens.get(k + 2)[0].equals("=") || tokens.get(k + 2)[0].equals(";")) {
                throw new IllegalArgumentException("option " + JAAS + ": expected key=\"value\" pairs after the control flag");
            }
            values.put(tokens.get(k)[1], tokens.get(k + 2)[1]);
            k += 3;
        }
        if (k >= tokens.size()) {
            throw new IllegalArgumentException("option " + JAAS + " must end with ';'");
        }
        if (k + 1 != tokens.size()) {
            throw new IllegalArgumentException("option " + JAAS + " holds more than one login module: give exactly one");
        }
        if ("true".equalsIgnoreCase(values.get("tokenauth"))) {
            throw new IllegalArgumentException("option " + JAAS + ": delegation tokens (tokenauth=true) are not supported");
        }
        return values;
    }

    // -- TLS ---------------------------------------------------------------------------------------------------

    /** ``socket`` wrapped in TLS to ``host`` (handshake done), the broker checked against the CA and its name. */
    Socket wrap(Socket socket, String host, int port) throws IOException {
        SSLSocket tls = (SSLSocket) context().getSocketFactory().createSocket(socket, host, port, true);
        SSLParameters params = tls.getSSLParameters();
        params.setEndpointIdentificationAlgorithm("HTTPS");
        tls.setSSLParameters(params);
        tls.startHandshake();
        return tls;
    }

    private synchronized SSLContext context() throws IOException {
        if (context != null) {
            return context;
        }
        try {
            CertificateFactory cf = CertificateFactory.getInstance("X.509");
            KeyStore trust = KeyStore.getInstance(KeyStore.getDefaultType());
            trust.load(null, null);
            int i = 0;
            try (InputStream in = new FileInputStream(caFile)) {
                for (Certificate c : cf.generateCertificates(in)) {
                    trust.setCertificateEntry("ca-" + i++, c);
                }
            }
            if (i == 0) {
                throw new IOException("no certificate in " + caFile);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(trust);
            KeyManagerFactory kmf = null;
            if (certFile != null) {
                List<Certificate> chain = new ArrayList<>();
                try (InputStream in = new FileInputStream(certFile)) {
                    chain.addAll(cf.generateCertificates(in));
                }
                KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
                keys.load(null, null);
                char[] none = new char[0];
                keys.setKeyEntry("client", privateKey(keyFile), none, chain.toArray(new Certificate[0]));
                kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
                kmf.init(keys, none);
            }
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), new SecureRandom());
            context = ctx;
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IOException("TLS setup from " + caFile + (certFile != null ? " and " + certFile : "") + ": "
                    + e.getMessage(), e);
        }
    }

    private static PrivateKey privateKey(String file) throws IOException, GeneralSecurityException {
        String pem = Files.readString(Path.of(file), StandardCharsets.US_ASCII);
        int begin = pem.indexOf("-----BEGIN PRIVATE KEY-----");
        int end = pem.indexOf("-----END PRIVATE KEY-----");
        if (begin < 0 || end < 0) {
            throw new IOException(file + " holds no unencrypted PKCS#8 key (-----BEGIN PRIVATE KEY-----)");
        }
        byte[] der = Base64.getMimeDecoder().decode(pem.substring(begin + 27, end));
        for (String alg : List.of("EC", "RSA", "Ed25519")) {
            try {
                return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException ignored) {
                // the next algorithm
            }
        }
        throw new IOException(file + ": not an EC, RSA or Ed25519 key");
    }

    // -- SASL/SCRAM --------------------------------------------------------------------------------------------

    /** SaslHandshake v1 then the SCRAM exchange in SaslAuthenticate v1 requests. */
    void authenticate(KafkaWire w) throws IOException {
        ByteBuffer r = w.call(SASL_HANDSHAKE, (short) 1, new KafkaWire.Body().str(mechanism).done());
        short err = r.getShort();
        if (err != 0) {
            throw new IOException("UNSUPPORTED_SASL_MECHANISM: " + w.address + " does not take " + mechanism
                    + " (Kafka error code " + err + ")");
        }
        boolean sha512 = mechanism.equals("SCRAM-SHA-512");
        String hmac = sha512 ? "HmacSHA512" : "HmacSHA256";
        byte[] nonceBytes = new byte[24];
        new SecureRandom().nextBytes(nonceBytes);
        String cnonce = Base64.getEncoder().withoutPadding().encodeToString(nonceBytes);
        String first = "n=" + username.replace("=", "=3D").replace(",", "=2C") + ",r=" + cnonce;
        String serverFirst = new String(exchange(w, ("n,," + first).getBytes(StandardCharsets.UTF_8)),
                StandardCharsets.UTF_8);
        Map<String, String> sf = attributes(serverFirst);
        String nonce = sf.get("r");
        if (nonce == null || !nonce.startsWith(cnonce) || nonce.length() == cnonce.length()) {
            throw new IOException("SASL_AUTHENTICATION_FAILED: the server's SCRAM nonce does not extend ours");
        }
        int iterations;
        byte[] salt;
        try {
            iterations = Integer.parseInt(sf.get("i"));
            salt = Base64.getDecoder().decode(sf.get("s"));
        } catch (RuntimeException e) {
            throw new IOException("SASL_AUTHENTICATION_FAILED: a malformed SCRAM server-first message", e);
        }
        if (iterations < 4096) {
            throw new IOException("SASL_AUTHENTICATION_FAILED: " + iterations + " SCRAM iterations, below 4096");
        }
        try {
            byte[] salted = SecretKeyFactory.getInstance(sha512 ? "PBKDF2WithHmacSHA512" : "PBKDF2WithHmacSHA256")
                    .generateSecret(new PBEKeySpec(password.toCharArray(), salt, iterations, sha512 ? 512 : 256))
                    .getEncoded();
            byte[] clientKey = hmac(hmac, salted, "Client Key".getBytes(StandardCharsets.US_ASCII));
            byte[] storedKey = MessageDigest.getInstance(sha512 ? "SHA-512" : "SHA-256").digest(clientKey);
            String withoutProof = "c=biws,r=" + nonce;
            byte[] auth = (first + "," + serverFirst + "," + withoutProof).getBytes(StandardCharsets.UTF_8);
            byte[] signature = hmac(hmac, storedKey, auth);
            byte[] proof = new byte[clientKey.length];
            for (int i = 0; i < proof.length; i++) {
                proof[i] = (byte) (clientKey[i] ^ signature[i]);
            }
            String last = withoutProof + ",p=" + Base64.getEncoder().encodeToString(proof);
            Map<String, String> fin = attributes(new String(exchange(w, last.getBytes(StandardCharsets.UTF_8)),
                    StandardCharsets.UTF_8));
            if (fin.containsKey("e")) {
                throw new IOException("SASL_AUTHENTICATION_FAILED: " + fin.get("e"));
            }
            byte[] serverKey = hmac(hmac, salted, "Server Key".getBytes(StandardCharsets.US_ASCII));
            byte[] expected = hmac(hmac, serverKey, auth);
            byte[] got = fin.get("v") == null ? new byte[0] : Base64.getDecoder().decode(fin.get("v"));
            if (!MessageDigest.isEqual(expected, got)) {
                throw new IOException("SASL_AUTHENTICATION_FAILED: the server's SCRAM signature is wrong");
            }
        } catch (GeneralSecurityException e) {
            throw new IOException("SCRAM: " + e.getMessage(), e);
        }
    }

    private static byte[] exchange(KafkaWire w, byte[] payload) throws IOException {
        ByteBuffer body = ByteBuffer.allocate(4 + payload.length).putInt(payload.length).put(payload);
        body.flip();
        ByteBuffer r = w.call(SASL_AUTHENTICATE, (short) 1, body);
        short err = r.getShort();
        String message = KafkaWire.str(r);
        if (err != 0) {
            throw new IOException((err == 58 ? "SASL_AUTHENTICATION_FAILED" : "Kafka error code " + err)
                    + (message != null ? ": " + message : ""));
        }
        int n = r.getInt();
        byte[] out = new byte[Math.max(n, 0)];
        r.get(out);
        return out;
    }

    private static Map<String, String> attributes(String message) {
        Map<String, String> out = new HashMap<>();
        for (String part : message.split(",")) {
            int eq = part.indexOf('=');
            if (eq > 0) {
                out.put(part.substring(0, eq), part.substring(eq + 1));
            }
        }
        return out;
    }

    private static byte[] hmac(String alg, byte[] key, byte[] data) throws GeneralSecurityException {
        Mac mac = Mac.getInstance(alg);
        mac.init(new SecretKeySpec(key, alg));
        return mac.doFinal(data);
    }
}
