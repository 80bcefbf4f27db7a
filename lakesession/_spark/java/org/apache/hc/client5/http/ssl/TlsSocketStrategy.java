/*
 * Stand-in for httpclient5 5.4's org.apache.hc.client5.http.ssl.TlsSocketStrategy.
 *
 * Iceberg 1.10's REST HTTPClient refers to this interface, which first appeared
 * in httpclient5 5.4; the newest httpclient5 reachable from PyPI/Debian stable
 * is 5.3.1. The JVM needs the type to exist for HTTPClient to link and verify.
 * lakesession compiles this file with `javac --release 8` and relocates it with
 * the rest of httpclient5 into org.apache.iceberg.shaded.org.apache.hc.
 *
 * Only `rest.client.tls.configurer-impl` cannot work with this set (it calls
 * PoolingHttpClientConnectionManagerBuilder.setTlsSocketStrategy, a 5.4 method).
 * The signature matches httpclient5 5.4 exactly.
 */
package org.apache.hc.client5.http.ssl;

import java.io.IOException;
import java.net.Socket;
import javax.net.ssl.SSLSocket;
import org.apache.hc.core5.http.protocol.HttpContext;

public interface TlsSocketStrategy {

    SSLSocket upgrade(Socket socket, String target, int port, Object attachment, HttpContext context)
            throws IOException;
}
