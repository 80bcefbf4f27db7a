package dev.lakesession.jvm;

import com.amazonaws.handlers.RequestHandler2;
import com.amazonaws.services.s3.AmazonS3;
import java.io.IOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.s3a.DefaultS3ClientFactory;

/**
 * Hadoop 3.3's S3A client factory (AWS SDK v1, Spark 3.5; {@code fs.s3a.s3.client.factory.impl}): adds the
 * request check ({@link GrantCheckHandlerV1}, with the filesystem's Configuration) to the client's request
 * handlers, and takes the store's endpoint, path style and region as the catalog vends them ({@link
 * GrantCheck#vended}) unless the user set them.
 */
public class GatewayS3ClientFactoryV1 extends DefaultS3ClientFactory {
  static final String SIGNER = "fs.s3a.signing-algorithm";

  @Override
  public AmazonS3 createS3Client(URI uri, S3ClientCreationParameters parameters) throws IOException {
    Configuration conf = getConf();
    if (!GrantCheck.wired(conf)) {
      return super.createS3Client(uri, parameters);
    }
    List<RequestHandler2> handlers = new ArrayList<>();
    if (parameters.getRequestHandlers() != null) {
      handlers.addAll(parameters.getRequestHandlers());
    }
    handlers.add(new GrantCheckHandlerV1(conf));
    parameters.withRequestHandlers(handlers);
    GrantCheck.Vended v = GrantCheck.vended(conf, uri);
    if (v != null) {
      parameters.withEndpoint(v.endpoint);
      if (v.pathStyle != null) {
        parameters.withPathStyleAccess(v.pathStyle);
      }
      if (v.region != null) {
        conf.set("fs.s3a.endpoint.region", v.region); // Hadoop 3.3's factory reads the region from its conf
      }
      if (!GrantCheck.userSet(conf, SIGNER)) {
        // SDK v1 signs for an endpoint outside AWS with Signature V2 unless told: S3-compatible stores want V4
        conf.set(SIGNER, "AWSS3V4SignerType");
      }
    }
    return super.createS3Client(uri, parameters);
  }
}
