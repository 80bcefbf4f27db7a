package dev.lakesession.jvm;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.fs.s3a.DefaultS3ClientFactory;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;

/**
 * S3A's client factory ({@code fs.s3a.s3.client.factory.impl}, Hadoop 3.4): the store's endpoint, path-style
 * addressing and region as the catalog vends them with the bucket's credentials ({@link GrantCheck#vended}),
 * unless the user set them.
 */
public class GatewayS3ClientFactory extends DefaultS3ClientFactory {
  @Override
  public S3Client createS3Client(URI uri, S3ClientCreationParameters parameters) throws IOException {
    return super.createS3Client(uri, vended(uri, parameters));
  }

  @Override
  public S3AsyncClient createS3AsyncClient(URI uri, S3ClientCreationParameters parameters) throws IOException {
    return super.createS3AsyncClient(uri, vended(uri, parameters));
  }

  private S3ClientCreationParameters vended(URI uri, S3ClientCreationParameters parameters) throws IOException {
    GrantCheck.Vended v = GrantCheck.vended(getConf(), uri);
    if (v == null) {
      return parameters;
    }
    parameters.withEndpoint(v.endpoint);
    if (v.pathStyle != null) {
      parameters.withPathStyleAccess(v.pathStyle);
    }
    if (v.region != null) {
      parameters.withRegion(v.region);
    }
    return parameters;
  }
}
