package dev.lakesession.jvm;

import java.io.IOException;
import java.net.URI;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.s3a.DefaultS3ClientFactory;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;

/**
 * S3A's client factory ({@code fs.s3a.s3.client.factory.impl}): the store's endpoint, path-style
 * addressing and region as the catalog vends them with the bucket's credentials ({@code
 * s3.endpoint}, {@code s3.path-style-access}, {@code client.region}), as Iceberg's S3FileIO takes
 * them, unless the user set {@code fs.s3a.endpoint} (globally or per bucket; S3A has propagated
 * per-bucket options into the filesystem's conf by now).
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
    Configuration conf = getConf();
    if (conf == null || conf.getTrimmed("fs.s3a.lakesession.gateway.uri") == null) {
      return parameters;
    }
    String userEndpoint = conf.getTrimmed("fs.s3a.endpoint", "");
    if (!userEndpoint.isEmpty()) {
      return parameters; // the user's setting wins
    }
    Map<String, String> client = BucketCredentials.of(conf, uri.getHost(), "read").answer().client;
    String endpoint = client.get("s3.endpoint");
    if (endpoint == null || endpoint.isEmpty()) {
      return parameters; // AWS: the SDK finds the endpoint from the region
    }
    parameters.withEndpoint(endpoint);
    if (!userSet(conf, "fs.s3a.path.style.access")) {
      parameters.withPathStyleAccess(Boolean.parseBoolean(client.getOrDefault("s3.path-style-access", "false")));
    }
    String region = client.getOrDefault("client.region", client.get("s3.region"));
    if (region != null && !userSet(conf, "fs.s3a.endpoint.region")) {
      parameters.withRegion(region);
    }
    return parameters;
  }

  /** Set by someone, not just Hadoop's core-default.xml (which says path.style.access=false). */
  static boolean userSet(Configuration conf, String key) {
    if (conf.getTrimmed(key, "").isEmpty()) {
      return false;
    }
    String[] sources = conf.getPropertySources(key);
    if (sources == null) {
      return true;
    }
    for (String s : sources) {
      if (!s.endsWith("-default.xml")) {
        return true;
      }
    }
    return false;
  }
}
