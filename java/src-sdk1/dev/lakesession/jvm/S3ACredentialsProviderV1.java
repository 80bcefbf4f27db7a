package dev.lakesession.jvm;

import com.amazonaws.auth.AWSCredentials;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.auth.BasicAWSCredentials;
import com.amazonaws.auth.BasicSessionCredentials;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;

/**
 * AWS SDK v1 provider for Hadoop 3.3's S3A (Spark 3.5; {@code fs.s3a.aws.credentials.provider}): the bucket's
 * key as {@link S3AKeys} picks it, as {@link S3ACredentialsProvider} does on SDK v2. Requests naming an
 * object are signed with the key of their prefix by {@link GrantCheckHandlerV1}.
 */
public final class S3ACredentialsProviderV1 implements AWSCredentialsProvider {
  private final S3AKeys keys;

  public S3ACredentialsProviderV1(URI uri, Configuration conf) {
    this.keys = new S3AKeys(uri.getHost(), conf, S3AKeys.mode(conf));
  }

  static AWSCredentials toSdk(Creds c) {
    if (c.sessionToken == null) {
      return new BasicAWSCredentials(c.accessKeyId, c.secretAccessKey);
    }
    return new BasicSessionCredentials(c.accessKeyId, c.secretAccessKey, c.sessionToken);
  }

  @Override
  public AWSCredentials getCredentials() {
    try {
      return toSdk(keys.current());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void refresh() {
    // the union refreshes itself ahead of expiry (BucketCredentials)
  }

  @Override
  public String toString() {
    return "lakesession S3ACredentialsProviderV1{" + keys + "}";
  }
}
